"""dispatch.py and schemes.py: supports() is exact, unsupported schemes raise, block picking, head dims that
are not powers of two (zero-padded to Triton widths: values and gradients unchanged), and
posjax.attention's implementation='kernel' reaching the kernel."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.kernels import flash_attention, supports
from posjax.kernels.cases import FUSED_CASES
from posjax.kernels.dispatch import pick_block
from posjax.kernels.schemes import FUSED_SCHEMES
from posjax.positions.base import Scheme


def test_supports_is_exact():
    fused = [{"name": "none"}, {"name": "learned"}, {"name": "sinusoidal"},
             {"name": "rope"}, {"name": "rope", "interleaved": False, "rotary_dim": 8},
             {"name": "rope", "scaling": "linear", "factor": 2.0},
             {"name": "rope", "scaling": "ntk", "factor": 2.0},
             {"name": "rope", "scaling": "dynamic_ntk", "factor": 2.0, "original_length": 8},
             {"name": "rope", "scaling": "yarn", "factor": 2.0, "original_length": 8},
             {"name": "xpos"}, {"name": "alibi"}, {"name": "alibi", "symmetric": False},
             {"name": "kerple"}, {"name": "kerple", "variant": "power"},
             {"name": "t5"}, {"name": "t5", "bidirectional": False},
             {"name": "shaw"}, {"name": "nezha"}, {"name": "deberta"},
             {"name": "deberta", "p2c": False, "bucket_size": 0}]
    for config in fused:
        assert supports(positions.make(config)), config
    assert supports(None)
    for name in ["rerope", "leaky_rerope", "sandwich", "fire", "xl", "tupe"]:
        assert not supports(positions.make(name)), name

    class Custom(Scheme):  # an unknown attention hook is never assumed
        def bias(self, params, q_pos, k_pos):
            return 0.0

    assert not supports(Custom())


def test_fused_cases_cover_every_fused_scheme():
    """posjax.kernels.cases (shared by these tests and bench/) lists every fused class, and
    only supported schemes."""
    covered = {type(positions.make(config)) for config in FUSED_CASES.values()}
    assert covered >= set(FUSED_SCHEMES)
    for name, config in FUSED_CASES.items():
        assert supports(positions.make(config)), name


def test_unsupported_or_unbound_scheme_raises(kc):
    q, k, v, _ = kc.inputs(1, 16, 16, jnp.float32)
    with pytest.raises(ConfigError, match="scheme"):
        flash_attention(q, k, v, scheme=positions.make("sandwich"), params={})
    with pytest.raises(ConfigError, match="bound"):
        flash_attention(q, k, v, scheme=positions.make("alibi"), params={})


def test_pick_block():
    assert pick_block(128, 24, 64) == 32  # no larger than the (power-of-two) sequence
    assert pick_block(100, 1000, 64) == 64  # rounded down to a power of two
    assert pick_block(4, 1000, 64) == 16  # Triton needs >= 16
    assert pick_block(None, 5000, 64) == 64
    assert pick_block(64, 40, 128, minimum=128) == 128  # 'tpu' layout: multiples of 128
    assert pick_block(300, 5000, 128, minimum=128) == 256

@pytest.mark.slow
def test_attend_kernel_dispatch(kc):
    # attention's implementation='kernel' reaches this kernel on CPU (interpret mode).
    scheme, params = kc.scheme({"name": "alibi"})
    q, k, v, _ = kc.inputs(1, 20, 20, jnp.float32, seed=10)
    out = attend(q, k, v, scheme=scheme, params=params, implementation="kernel",
                 block_q=16, block_k=16)
    ref = attend(q, k, v, scheme=scheme, params=params, implementation="reference")
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), **kc.F32_TOL)


def test_tpu_supports_and_refusals(monkeypatch):
    # On TPU (faked backend query) supports() answers per scheme exactly as elsewhere: the
    # 'tpu' layout lowers for every fused scheme (test_lowering_tpu.py); unfused schemes stay
    # False (attention falls back to 'chunked').
    from posjax.kernels import dispatch

    monkeypatch.setattr(dispatch, "target_backend", lambda: "tpu")
    for name in ["none", "learned", "rope", "xpos", "alibi", "kerple", "t5", "shaw", "nezha",
                 "deberta"]:
        assert supports(positions.make(name)), name
    assert supports(None)
    for name in ["rerope", "leaky_rerope", "sandwich", "fire", "xl", "tupe"]:
        assert not supports(positions.make(name)), name
    q = jnp.zeros((1, 16, 2, 16), jnp.float32)
    with pytest.raises(ConfigError, match="layout"):  # compiled Mosaic needs the tpu layout
        flash_attention(q, q, q, interpret=False, layout="flat")
    with pytest.raises(ConfigError, match="layout"):
        flash_attention(q, q, q, layout="mosaic")


def test_auto_picks_kernel_on_tpu(monkeypatch):
    # attention's 'auto' asks supports() on accelerators: on (faked) TPU it now picks the
    # kernel for fused schemes and keeps the XLA paths for the others.
    import jax

    from posjax.attention import choose_implementation

    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert choose_implementation("auto", positions.make("t5"), 4096) == "kernel"
    assert choose_implementation("auto", positions.make("sandwich"), 4096) == "chunked"


def test_compiled_refused_on_cpu():
    # No Pallas compiler for the CPU backend: interpret=False is refused before tracing.
    q = jnp.zeros((1, 16, 2, 16), jnp.float32)
    with pytest.raises(ConfigError, match="interpret"):
        flash_attention(q, q, q, interpret=False)


@pytest.mark.slow
@pytest.mark.parametrize("config", [
    {"name": "rope", "interleaved": False, "rotary_dim": 12},
    {"name": "shaw", "max_relative_position": 3},
], ids=["rope_partial", "shaw"])
def test_head_dim_not_power_of_two(config, kc):
    # D=24: the wrapper zero-pads to Triton tile widths (rotated halves 6 -> 16 each, the
    # pass-through 12 -> 16, tables 24 -> 32); results and gradients are unchanged.
    scheme, params = kc.scheme(config, dim=24)
    q, k, v, cot = kc.inputs(1, 20, 20, jnp.float32, seed=13, dim=24)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=config["name"] == "shaw",
               causal=True)
