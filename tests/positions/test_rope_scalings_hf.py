"""llama3, longrope and proportional (p-RoPE) against Hugging Face transformers.

Each case runs at NON-default settings (odd bases, factors, edges, partial rotation) and
compares (1) the inverse frequencies and attention factor with transformers'
`modeling_rope_utils.ROPE_INIT_FUNCTIONS` and (2) the rotated q and k with transformers'
own LlamaRotaryEmbedding + apply_rotary_pos_emb (half-split pairing, which is HF's), so the
pairing of partial/proportional dims and LongRoPE's short/long switch are checked as HF runs
them, not as we read them.
"""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from posjax.errors import ConfigError
from posjax.positions import rope_scaling as rs
from posjax.positions.base import Dims
from posjax.positions.rotary import Rope

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

HEAD_DIM, HEADS = 32, 2
SHORT = [1.0 + i / 10 for i in range(HEAD_DIM // 2)]
LONG = [2.0 + i * 0.75 for i in range(HEAD_DIM // 2)]

# (posjax Rope fields, HF rope_parameters)
CASES = {
    "llama3": (
        dict(base=5000.0, scaling="llama3", factor=6.0, original_length=256,
             low_freq_factor=2.0, high_freq_factor=8.0),
        dict(rope_type="llama3", rope_theta=5000.0, factor=6.0, low_freq_factor=2.0,
             high_freq_factor=8.0, original_max_position_embeddings=256)),
    "longrope": (
        dict(base=5000.0, scaling="longrope", factor=8.0, original_length=64,
             short_factor=SHORT, long_factor=LONG),
        dict(rope_type="longrope", rope_theta=5000.0, factor=8.0, short_factor=SHORT,
             long_factor=LONG, original_max_position_embeddings=64)),
    "longrope_attention_factor": (
        dict(base=5000.0, scaling="longrope", factor=8.0, original_length=64,
             short_factor=SHORT, long_factor=LONG, attention_factor=1.3),
        dict(rope_type="longrope", rope_theta=5000.0, factor=8.0, short_factor=SHORT,
             long_factor=LONG, original_max_position_embeddings=64, attention_factor=1.3)),
    "proportional": (
        dict(base=5000.0, scaling="proportional", rotary_fraction=0.25),
        dict(rope_type="proportional", rope_theta=5000.0, partial_rotary_factor=0.25)),
    "proportional_odd_pairs": (
        dict(base=777.0, scaling="proportional", rotary_fraction=0.4),  # int(0.4*32//2) = 6
        dict(rope_type="proportional", rope_theta=777.0, partial_rotary_factor=0.4)),
}


def hf_config(params):
    return LlamaConfig(hidden_size=HEAD_DIM * HEADS, num_attention_heads=HEADS, head_dim=HEAD_DIM,
                       max_position_embeddings=4096, rope_parameters=dict(params))


@pytest.mark.parametrize("case", sorted(CASES))
def test_inv_freq_and_attention_factor_match_hf(case):
    ours, theirs = CASES[case]
    scheme = Rope(**ours).bind(Dims(hidden=HEAD_DIM * HEADS, num_heads=HEADS, head_dim=HEAD_DIM,
                                    max_length=512))
    fn = ROPE_INIT_FUNCTIONS[theirs["rope_type"]]
    for n in (32, 200):  # below and above longrope's original length (64)
        inv, factor = fn(hf_config(theirs), "cpu", seq_len=n)
        k_pos = jnp.arange(n)[None]
        got = np.asarray(scheme.inv_freq(HEAD_DIM, k_pos)).reshape(-1)
        np.testing.assert_allclose(got, inv.numpy(), rtol=2e-6, atol=1e-12)
        assert scheme.mscale() == pytest.approx(factor, rel=1e-12)
        assert scheme.logit_scale(HEAD_DIM) == pytest.approx(factor**2 / math.sqrt(HEAD_DIM))


@pytest.mark.parametrize("case", sorted(CASES))
def test_rotated_q_k_match_hf(case):
    ours, theirs = CASES[case]
    scheme = Rope(interleaved=False, **ours)
    rope = modeling_llama.LlamaRotaryEmbedding(hf_config(theirs))
    rng = np.random.default_rng(0)
    for n in (24, 150):  # longrope: short factors, then long ones (max position >= 64)
        q = rng.standard_normal((1, n, HEADS, HEAD_DIM)).astype(np.float32)
        k = rng.standard_normal((1, n, HEADS, HEAD_DIM)).astype(np.float32)
        pos = np.arange(n)[None] * 3 % (n + 7)  # unsorted, gaps; max + 1 decides longrope
        qt, kt = (torch.from_numpy(x).transpose(1, 2) for x in (q, k))
        cos, sin = rope(qt, torch.from_numpy(pos))
        hq, hk = modeling_llama.apply_rotary_pos_emb(qt, kt, cos, sin)
        # HF multiplies cos and sin by the attention factor; posjax puts its square in the
        # logit scale, so compare the rotation with that factor divided out.
        a = rope.attention_scaling
        gq, gk = scheme.rotate({}, jnp.asarray(q), jnp.asarray(k), pos, pos)
        np.testing.assert_allclose(np.asarray(gq), hq.transpose(1, 2).numpy() / a, atol=2e-5)
        np.testing.assert_allclose(np.asarray(gk), hk.transpose(1, 2).numpy() / a, atol=2e-5)


def test_longrope_switches_per_row():
    scheme = Rope(**CASES["longrope"][0])
    k_pos = jnp.stack([jnp.arange(64), jnp.arange(64) + 1])  # max+1 = 64 (short), 65 (long)
    inv = np.asarray(scheme.inv_freq(HEAD_DIM, k_pos))
    theta = np.asarray(rs.rope_inv_freq(HEAD_DIM, 5000.0))
    np.testing.assert_allclose(inv[0], theta / np.array(SHORT), rtol=1e-6)
    np.testing.assert_allclose(inv[1], theta / np.array(LONG), rtol=1e-6)


def test_llama3_edges_by_hand():
    # L = 256, low = 2, high = 8: keep wavelengths < 32, divide those > 128 by s, blend between
    inv = np.asarray(rs.llama3_inv_freq(32, 5000.0, 6.0, 256, 2.0, 8.0))
    theta = 5000.0 ** (-np.arange(0, 32, 2) / 32)
    wave = 2 * np.pi / theta
    np.testing.assert_allclose(inv[wave < 32], theta[wave < 32], rtol=1e-6)
    np.testing.assert_allclose(inv[wave > 128], theta[wave > 128] / 6, rtol=1e-6)
    mid = (wave >= 32) & (wave <= 128)
    assert mid.any()
    smooth = (256 / wave[mid] - 2) / 6
    np.testing.assert_allclose(inv[mid], theta[mid] * ((1 - smooth) / 6 + smooth), rtol=1e-5)


def test_proportional_keeps_full_dim_exponent_unlike_partial():
    p = np.asarray(Rope(scaling="proportional", rotary_dim=8, factor=2.0).inv_freq(32))
    partial = np.asarray(Rope(rotary_dim=8).inv_freq(32))
    theta = 10000.0 ** (-np.arange(0, 32, 2) / 32)
    np.testing.assert_allclose(p[:4], theta[:4] / 2, rtol=1e-6)  # full-D exponent, / s
    assert (p[4:] == 0).all() and p.shape == (16,)
    np.testing.assert_allclose(partial, 10000.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-6)


DIMS = Dims(hidden=64, num_heads=2, head_dim=32, max_length=128)


@pytest.mark.parametrize("fields,field", [
    (dict(scaling="llama4"), "scaling"),
    (dict(scaling="llama3", factor=4.0), "original_length"),
    (dict(scaling="llama3", factor=4.0, original_length=64, low_freq_factor=4.0,
          high_freq_factor=2.0), "high_freq_factor"),
    (dict(scaling="longrope", original_length=64, long_factor=LONG), "short_factor"),
    (dict(scaling="longrope", original_length=64, short_factor=SHORT, long_factor=[1.0, -1.0]),
     "long_factor"),
    (dict(scaling="longrope", original_length=64, short_factor=SHORT[:15], long_factor=LONG),
     "short_factor"),
    (dict(scaling="longrope", original_length=64, short_factor=SHORT, long_factor=LONG,
          rotary_dim=16), "short_factor"),  # 16 factors for 8 rotated pairs
    (dict(short_factor=SHORT), "short_factor"),  # only longrope takes factors
    (dict(scaling="proportional", rotary_fraction=0.05), "rotary_fraction"),  # 0 pairs
    (dict(scaling="proportional", rotary_dim=34), "rotary_dim"),
])
def test_bad_input_names_the_field(fields, field):
    with pytest.raises(ConfigError) as e:
        Rope(**fields).bind(DIMS)
    assert e.value.field.endswith(field), str(e.value)
    assert "\n" not in str(e.value)


def test_llama3_is_an_eval_and_extend_method():
    from posjax import pretrained
    from posjax.evaluation import methods
    from posjax.evaluation.run.restore import Run
    from tests.evaluation.fixtures import TRAINED, tiny_config

    config = tiny_config("rope")
    config.model.vocab_size = 100
    cell = methods.make_cell(Run("fake", "/nonexistent", 0, config, tokenizer=None),
                             methods.Variant("llama3"), 4 * TRAINED)
    p = cell.config.position
    assert (p.scaling, p.factor, p.original_length) == ("llama3", 4.0, TRAINED)
    assert "longrope" not in methods.METHODS and "proportional" not in methods.METHODS
    assert pretrained.extended_config(config, 4 * TRAINED, "llama3").position.scaling == "llama3"


@pytest.mark.slow
def test_train_py_bad_longrope_factors_exit_2(tmp_path):
    import subprocess
    import sys

    from tests.reliability import runner

    wd = tmp_path / "wd"
    r = subprocess.run(
        [sys.executable, "train.py", "--config=configs/rope.py:tiny",
         "--config.position.scaling=longrope", "--config.position.short_factor=(1.0, 2.0)",
         "--config.position.long_factor=(1.0, 2.0)", f"--workdir={wd}"],
        cwd=runner.REPO, env=runner.make_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "position.short_factor=" in lines[0], r.stderr
    assert not wd.exists()
