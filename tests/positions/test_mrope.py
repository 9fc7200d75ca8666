"""M-RoPE (`mrope`): rotated q and k against transformers' Qwen2-VL (Qwen2VLRotaryEmbedding
with its mrope_section, and apply_rotary_pos_emb), attention against a direct definition
(values and gradients, on the reference, chunked and rows paths, (t, h, w) positions), its
defining properties (logits depend on (dt, dh, dw) only; a text token (i, i, i) is plain
RoPE), the default sections, the one-line errors and the listing."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.__main__ import listing
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import Qwen2VLConfig  # noqa: E402
from transformers.models.qwen2_vl import modeling_qwen2_vl  # noqa: E402

B, L, H, D = 2, 10, 2, 16
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)
PATHS = ("reference", "chunked", "rows")


def _positions(seed=0):
    """A text run (i, i, i) then a 2 x 4 image at t = 2: (2, 2 + r, 2 + c), per batch row."""
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(B):
        start = rng.randint(0, 5)
        text = [(start + i,) * 3 for i in range(2)]
        t0 = start + 2
        image = [(t0, t0 + r, t0 + c) for r in range(2) for c in range(4)]
        out.append(text + image)
    return np.asarray(out, np.int32)  # [B, L, 3]


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    return tuple(jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))


@pytest.mark.parametrize("base,sections", [(10000.0, None), (500.0, (1, 4, 3))])
def test_rotated_q_and_k_match_transformers_qwen2_vl(base, sections):
    scheme = positions.make("mrope", base=base, sections=sections).bind(DIMS)
    section = list(scheme.pair_sections(D))
    if sections is None:
        assert section == [2, 3, 3]  # Qwen2-VL's 16 : 24 : 24 of 64 pairs, at 8 pairs
    config = Qwen2VLConfig(text_config=dict(
        hidden_size=H * D, num_attention_heads=H, num_key_value_heads=H,
        rope_parameters=dict(rope_type="default", rope_theta=base, mrope_section=section)))
    emb = modeling_qwen2_vl.Qwen2VLRotaryEmbedding(config.get_text_config())
    pos = _positions(1)
    q, k, _, _ = _inputs(1)
    position_ids = torch.tensor(np.moveaxis(pos, -1, 0).astype(np.int64))  # [3, B, L]
    cos, sin = emb(torch.zeros(1, dtype=torch.float32), position_ids)
    tq, tk = (torch.tensor(np.asarray(x)).transpose(1, 2) for x in (q, k))  # [B, H, L, D]
    want_q, want_k = modeling_qwen2_vl.apply_rotary_pos_emb(tq, tk, cos, sin)
    got_q, got_k = scheme.rotate({}, q, k, jnp.asarray(pos), jnp.asarray(pos))
    np.testing.assert_allclose(got_q, want_q.transpose(1, 2).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_k, want_k.transpose(1, 2).numpy(), rtol=1e-5, atol=1e-5)


def direct(q, k, v, pos, sections, base=10000.0):
    """Pair i (dims i, i + D/2) turned by theta_i * pos[c(i)], c = 0 for the first s_t
    pairs, 1 for the next s_h, 2 for the last s_w; softmax(q'.k' / sqrt(D)) v."""
    theta = base ** (-np.arange(0, D, 2) / D)
    coord = np.concatenate([np.full(s, c) for c, s in enumerate(sections)])
    ang = jnp.stack([pos[..., coord[i]].astype(jnp.float32) * theta[i]
                     for i in range(D // 2)], -1)[:, :, None]  # [B, L, 1, D/2]

    def turn(x):
        a, b = x[..., :D // 2], x[..., D // 2:]
        c, s = jnp.cos(ang), jnp.sin(ang)
        return jnp.concatenate([a * c - b * s, b * c + a * s], -1)

    logits = jnp.einsum("bihd,bjhd->bhij", turn(q), turn(k)) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


@pytest.mark.slow
def test_matches_direct_definition_values_and_grads_on_every_path():
    q, k, v, ct = _inputs()
    pos = jnp.asarray(_positions())
    scheme = positions.make("mrope").bind(DIMS)

    def both(f):
        return jax.jit(lambda: (f(q, k, v), jax.grad(
            lambda *a: (f(*a) * ct).sum(), (0, 1, 2))(q, k, v)))()

    want, want_grads = both(lambda q, k, v: direct(q, k, v, pos, (2, 3, 3)))
    for impl in PATHS:
        got, grads = both(lambda q, k, v, impl=impl: attend(
            q, k, v, scheme=scheme, q_pos=pos, k_pos=pos, implementation=impl, block_q=4,
            block_k=4))
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for a, b in zip(grads, want_grads):
            np.testing.assert_allclose(a, b, err_msg=impl, **TOL)


def test_logits_depend_on_the_offsets_and_text_is_plain_rope():
    q, k, _, _ = _inputs(2)
    pos = jnp.asarray(_positions(2))
    scheme = positions.make("mrope").bind(DIMS)

    def logits(s, q_pos, k_pos):
        qr, kr = s.rotate({}, q, k, q_pos, k_pos)
        return jnp.einsum("bihd,bjhd->bhij", qr, kr)

    base = logits(scheme, pos, pos)
    for shift in ((5, 0, 0), (0, 3, 0), (0, 0, 7), (2, -1, 4)):
        s = jnp.asarray(shift, jnp.int32)
        np.testing.assert_allclose(logits(scheme, pos + s, pos + s), base, rtol=1e-4, atol=1e-4)
    for axis in range(3):  # each coordinate of the keys moves the logits
        moved = logits(scheme, pos, pos.at[..., axis].add(1))
        assert np.abs(np.asarray(moved - base)).max() > 1e-2, axis
    idx = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    rope = positions.make("rope", interleaved=False).bind(DIMS)
    text = jnp.stack([idx] * 3, -1)
    np.testing.assert_allclose(logits(scheme, text, text), logits(rope, idx, idx),
                               rtol=1e-5, atol=1e-5)


def test_bad_fields_dims_and_listing():
    for value in ((1, 2), (1, -1, 8), (1.5, 3, 3), "233", 4):
        with pytest.raises(ConfigError, match="position.sections") as err:
            positions.make("mrope", sections=value)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="position.sections.*sum"):
        positions.make("mrope", sections=[2, 2, 2]).bind(DIMS)
    assert positions.make("mrope", sections=[2, 3, 3]).sections == (2, 3, 3)
    with pytest.raises(ConfigError, match="position.base"):
        positions.make("mrope", base=0.5)
    with pytest.raises(ConfigError, match="model.causal"):
        positions.make("mrope").bind(dataclasses.replace(DIMS, causal=True))
    with pytest.raises(ConfigError, match="model.head_dim"):
        positions.make("mrope").bind(dataclasses.replace(DIMS, head_dim=4, hidden=8))
    q, k, v, _ = _inputs()
    flat = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    with pytest.raises(ConfigError, match=r"q_pos.shape.*\[2, 10, 3\]"):
        attend(q, k, v, scheme=positions.make("mrope").bind(DIMS), q_pos=flat, k_pos=flat)
    assert "mrope  (hooks: rotate; 3-D positions)" in listing("schemes")
    assert "sections=None, interleaved=False" in listing("schemes")
