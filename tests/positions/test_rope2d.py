"""2-D RoPE (axial and mixed): attention against a direct definition with explicit per-token
rotation matrices (values and gradients, the learned frequencies included), the relative
property in both axes, mixed's start at axial, and the errors for wrong positions."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims

B, L, H, D = 2, 6, 2, 8
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)


def axial_freqs(base):
    """Written out independently of the module: pair s < D/4 turns with the row at
    base**(-s/(D/4)), pair D/4 + s with the column at the same rate."""
    w = np.array([base ** (-s / (D // 4)) for s in range(D // 4)])
    return np.concatenate([w, 0 * w]), np.concatenate([0 * w, w])


def rotation(angles, interleaved):
    """[..., D/2] angles -> [..., D, D] block rotations: pair (a, b) -> (a cos - b sin,
    b cos + a sin), pairs (2t, 2t+1) interleaved or (t, t + D/2) half-split."""
    out = jnp.zeros(angles.shape[:-1] + (D, D))
    for t in range(D // 2):
        i, j = (2 * t, 2 * t + 1) if interleaved else (t, t + D // 2)
        c, s = jnp.cos(angles[..., t]), jnp.sin(angles[..., t])
        out = out.at[..., i, i].set(c).at[..., i, j].set(-s)
        out = out.at[..., j, i].set(s).at[..., j, j].set(c)
    return out


def direct(q, k, v, f_row, f_col, pos, interleaved):
    """softmax((R(p_i) q_i) . (R(p_j) k_j) / sqrt(D)) v, angle of pair t at (r, c) =
    r f_row[t] + c f_col[t]; f [D/2] (shared) or [H, D/2] (per head)."""
    f_row, f_col = jnp.broadcast_to(f_row, (H, D // 2)), jnp.broadcast_to(f_col, (H, D // 2))
    p = pos.astype(jnp.float32)
    ang = p[..., 0, None, None] * f_row + p[..., 1, None, None] * f_col  # [B, L, H, D/2]
    rot = rotation(ang, interleaved)  # [B, L, H, D, D]
    qr = jnp.einsum("blhde,blhe->blhd", rot, q)
    kr = jnp.einsum("blhde,blhe->blhd", rot, k)
    logits = jnp.einsum("bihd,bjhd->bhij", qr, kr) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.asarray(rng.randint(0, 9, (B, L, 2)), jnp.int32)
    freqs = jnp.asarray(rng.uniform(-1.5, 1.5, (2, H, D // 2)), jnp.float32)
    return q, k, v, ct, pos, freqs


@pytest.mark.slow
@pytest.mark.parametrize("mode,interleaved", [("axial", True), ("mixed", False)])
def test_matches_direct_definition_values_and_grads(mode, interleaved):
    q, k, v, ct, pos, freqs = _inputs()
    scheme = positions.make("rope2d", mode=mode, interleaved=interleaved).bind(DIMS)

    def ours(impl):
        def f(q, k, v, fr):
            params = {"freqs": fr} if mode == "mixed" else {}
            return attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                          implementation=impl, block_q=4, block_k=4)
        return f

    def mine(q, k, v, fr):
        f_row, f_col = (fr[0], fr[1]) if mode == "mixed" else map(jnp.asarray,
                                                                     axial_freqs(scheme.base))
        return direct(q, k, v, f_row, f_col, pos, interleaved)

    grads = lambda f: jax.grad(lambda *a: (f(*a) * ct).sum(), (0, 1, 2, 3))  # noqa: E731
    run = jax.jit(lambda *a: (ours("reference")(*a), ours("chunked")(*a), mine(*a),
                              grads(ours("reference"))(*a), grads(ours("chunked"))(*a),
                              grads(mine)(*a)))
    ref, chunked, want, ref_grads, chunked_grads, want_grads = run(q, k, v, freqs)
    for got in (ref, chunked):
        np.testing.assert_allclose(got, want, **TOL)
    for got in (ref_grads, chunked_grads):
        for a, b in zip(got, want_grads):
            np.testing.assert_allclose(a, b, **TOL)
    if mode == "mixed":  # the learned frequencies of both directions get gradients
        g = np.asarray(want_grads[3])
        assert np.abs(g[0]).min() > 0 and np.abs(g[1]).min() > 0


@pytest.mark.parametrize("mode", ["axial", "mixed"])
def test_logits_depend_only_on_the_offset_in_both_axes(mode):
    q, k, _, _, pos, _ = _inputs(1)
    scheme = positions.make("rope2d", mode=mode).bind(DIMS)
    params = scheme.init_layer(jax.random.key(0))

    @jax.jit
    def logits(q_pos, k_pos):
        qr, kr = scheme.rotate(params, q, k, q_pos, k_pos)
        return jnp.einsum("bihd,bjhd->bhij", qr, kr)

    base = logits(pos, pos)
    for shift in ((3, 0), (0, 5), (-2, 7)):  # the same (dr, dc) for every pair: same logits
        s = jnp.asarray(shift, jnp.int32)
        np.testing.assert_allclose(logits(pos + s, pos + s), base, rtol=1e-4, atol=1e-4)
    for shift in ((1, 0), (0, 1)):  # moving only the keys along either axis changes them
        moved = logits(pos, pos + jnp.asarray(shift, jnp.int32))
        assert np.abs(np.asarray(moved - base)).max() > 1e-2, shift


def test_mixed_starts_as_axial_without_rotation_and_rotates_per_head():
    q, k, _, _, pos, _ = _inputs(2)
    axial = positions.make("rope2d", mode="axial", base=10.0).bind(DIMS)
    flat = positions.make("rope2d", mode="mixed", rotate_init=False).bind(DIMS)
    want = axial.rotate({}, q, k, pos, pos)
    got = flat.rotate(flat.init_layer(jax.random.key(0)), q, k, pos, pos)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    freqs = positions.make("rope2d", mode="mixed").bind(DIMS).init_layer(jax.random.key(3))
    f = np.asarray(freqs["freqs"])  # [2, H, D/2]
    assert f.shape == (2, H, D // 2) and not np.allclose(f[:, 0], f[:, 1])
    # each pair's (row, column) frequency keeps the magnitude base**(-s/(D/4))
    w = 10.0 ** (-np.arange(D // 4) / (D // 4))
    np.testing.assert_allclose(np.hypot(f[0], f[1]), np.tile(w, (H, 2)), rtol=1e-6)


def test_bad_fields_and_dims():
    with pytest.raises(ConfigError, match="position.mode"):
        positions.make("rope2d", mode="diagonal")
    with pytest.raises(ConfigError, match="position.base"):
        positions.make("rope2d", base=1.0)
    with pytest.raises(ConfigError, match="model.head_dim"):
        positions.make("rope2d").bind(dataclasses.replace(DIMS, head_dim=6, hidden=12))
    with pytest.raises(ConfigError, match="model.causal"):
        positions.make("rope2d").bind(dataclasses.replace(DIMS, causal=True))
    assert positions.make("rope2d").base == 100.0 and positions.make("rope2d", mode="mixed").base == 10.0


def test_positions_of_the_wrong_rank_are_refused():
    q, k, v, _, pos, _ = _inputs()
    flat = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    two_d = positions.make("rope2d").bind(DIMS)
    one_d = positions.make("rope").bind(DIMS)
    with pytest.raises(ConfigError, match=r"q_pos.shape.*\[2, 6, 2\].*rope2d"):
        attend(q, k, v, scheme=two_d, q_pos=flat, k_pos=flat)
    with pytest.raises(ConfigError, match=r"q_pos.*rope2d"):
        attend(q, k, v, scheme=two_d)  # no default grid
    with pytest.raises(ConfigError, match=r"q_pos.shape.*\[2, 6\].*1-D positions for position 'rope'"):
        attend(q, k, v, scheme=one_d, q_pos=pos, k_pos=pos)
    with pytest.raises(ConfigError, match="causal"):
        attend(q, k, v, scheme=two_d, q_pos=pos, k_pos=pos, causal=True)
    with pytest.raises(ConfigError, match="window"):
        attend(q, k, v, scheme=two_d, q_pos=pos, k_pos=pos, window=4)


@pytest.mark.slow
def test_mixed_frequencies_are_trained_params_of_every_layer():
    """Through the whole model: the loss has a nonzero gradient at every layer's freqs."""

    from tests.models.support import BATCH, LENGTH, layer_hook_grads, make_batch, model_config

    config = model_config({"name": "rope2d", "mode": "mixed"})
    batch = make_batch()
    idx = np.arange(LENGTH)
    batch["positions"] = np.broadcast_to(np.stack([idx // 4, idx % 4], -1), (BATCH, LENGTH, 2))
    for tree in layer_hook_grads(config, batch):
        g = np.asarray(tree["freqs"])
        assert g.shape == (2, config.model.num_heads, 4) and np.abs(g).min() > 0


@pytest.mark.slow
def test_pretrained_feeds_grid_positions_like_training(tmp_path):
    """A mixed rope2d model saved and loaded through posjax.pretrained gives what the model
    gives called directly on (row, column) positions: a square grid by default, `grid=` for
    another shape; a length that is no square (without grid=), and text, are refused by name."""
    from flax import nnx

    from posjax import models, pretrained
    from tests.models.support import BATCH, LENGTH, make_batch, model_config

    config = model_config({"name": "rope2d", "mode": "mixed"})
    model = models.build_model(config, nnx.Rngs(0))
    state = nnx.state(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    for layer in params["encoder"]["layers"].values():  # init (std 0.02) barely attends:
        for name in ("query", "key", "value", "out"):  # sharpen it so positions matter
            layer["attention"][name]["kernel"] = layer["attention"][name]["kernel"] * 10
    nnx.replace_by_pure_dict(state, params)
    nnx.update(model, state)
    config.data.tokenizer = "patch_codes"  # as a patches run saves it, with its vocab
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"patch:{i}" for i in range(45)]
    pretrained.Pretrained(config, params, vocab=vocab).save(str(tmp_path / "wd"))
    loaded = pretrained.load(str(tmp_path / "wd"))

    batch = make_batch()
    batch["token_type_ids"] = np.zeros_like(batch["input_ids"])
    idx = np.arange(LENGTH)
    for grid, cols in ((None, 4), ((2, 8), 8)):  # 16 = 4 x 4, or 2 rows of 8
        batch["positions"] = np.broadcast_to(np.stack([idx // cols, idx % cols], -1),
                                             (BATCH, LENGTH, 2))
        want = np.asarray(model(batch, deterministic=True)["mlm_logits"])
        got = loaded.mlm_logits(batch["input_ids"], grid=grid)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the two grids really differ, so the comparison above pins which one was used
    assert np.abs(loaded.mlm_logits(batch["input_ids"]) - got).max() > 1e-2
    with pytest.raises(ConfigError, match="input_ids.*length 12.*square grid"):
        loaded.encode(batch["input_ids"][:, :12])
    with pytest.raises(ConfigError, match="grid.*product is the length 16"):
        loaded.encode(batch["input_ids"], grid=(3, 5))
    with pytest.raises(ConfigError, match="tokenizer='patch_codes'.*image patch codes"):
        loaded.tokenize(["text"])
