"""The kernels lower for TPU (Mosaic) without a TPU: jax.export for platform 'tpu' runs the
Pallas Mosaic lowering on this CPU machine (block-shape checks: the last two dims of every
block divisible by (8, 128) or equal to the array's; kernel jaxpr -> Mosaic MLIR with its
per-primitive rules) and wraps each kernel in a tpu_custom_call. Checked here: the forward
and BOTH backward kernels (through the custom_vjp) of every fused scheme, float32 and
bfloat16, with every mask path on (padding, segments, causal, log-n) and once with none;
and that on TPU the other sequence streams block by block (VMEM O(block), not O(length)).

What this does NOT cover: libtpu's compilation of the Mosaic module (layout passes, VMEM
allocation) and running on TPU hardware; neither was available here.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from jax import export

from posjax import positions
from posjax.kernels import dispatch, flash_attention
from posjax.positions.base import Dims

B, L, H, D = 2, 200, 2, 64  # L not a block multiple (padded to 256)
CASES = {
    "none": {"name": "none"},
    "rope": {"name": "rope"},
    "xpos": {"name": "xpos"},
    "alibi": {"name": "alibi"},
    "kerple_log": {"name": "kerple"},
    "kerple_power": {"name": "kerple", "variant": "power"},
    "t5": {"name": "t5"},
    "shaw": {"name": "shaw", "max_relative_position": 16},
    "nezha": {"name": "nezha"},
    "deberta": {"name": "deberta"},
}
KERNELS = ("posjax_flash_fwd", "posjax_flash_dq", "posjax_flash_dkv")


def _export_grads(config, dtype, masks: bool, monkeypatch, length: int = L) -> str:
    monkeypatch.setattr(dispatch, "_backend", lambda: "tpu")  # target TPU from this CPU
    scheme = positions.make(config)
    params = scheme.init_layer(jax.random.PRNGKey(0), Dims(H, D, H * D, 1024))
    x = jnp.zeros((B, length, H, D), dtype)
    kwargs = {}
    if masks:
        seg = jnp.ones((B, L), jnp.int32)
        kwargs = dict(kv_mask=jnp.arange(L)[None, :] < jnp.asarray([[L], [150]]),
                      segment_ids=(seg, seg), causal=True, logn_length=128)

    def grads(q, k, v, params):
        def loss(q, k, v, params):
            # layout=None, interpret=False: what attend() runs on a TPU (default blocks 128).
            out = flash_attention(q, k, v, scheme=scheme, params=params, interpret=False,
                                  **kwargs)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, params)

    return export.export(jax.jit(grads), platforms=["tpu"])(x, x, x, params).mlir_module()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowers_to_mosaic(case, dtype, monkeypatch):
    text = _export_grads(CASES[case], dtype, True, monkeypatch)
    names = re.findall(r'kernel_name = "([a-z_]+)"', text)
    assert sorted(names) == sorted(KERNELS), names  # forward, dq, dkv: one call each
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 3


def test_lowers_without_masks(monkeypatch):
    # No mask at all and a block-multiple length (no padding mask either): the kernels'
    # unmasked branch (no per-tile skip) lowers too.
    text = _export_grads({"name": "alibi"}, jnp.bfloat16, False, monkeypatch, length=256)
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 3


def _pallas_calls(jaxpr):
    """Every pallas_call equation in a jaxpr, nested ones included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _pallas_calls(inner)


def test_streams_the_other_sequence(monkeypatch):
    # VMEM per program must not grow with the length: at 1024 tokens (8 blocks of 128) each
    # kernel walks the other sequence on a 4th, 'arbitrary' grid axis and no input block is
    # longer than one block along any axis (whole-sequence blocks would be copied to VMEM).
    monkeypatch.setattr(dispatch, "_backend", lambda: "tpu")
    x = jnp.zeros((1, 1024, 2, 64), jnp.bfloat16)
    seg = jnp.ones((1, 1024), jnp.int32)

    def grads(q):
        def loss(q):
            out = flash_attention(q, q, q, segment_ids=(seg, seg), causal=True,
                                  logn_length=128, interpret=False)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss)(q)

    calls = list(_pallas_calls(jax.make_jaxpr(grads)(x).jaxpr))
    assert len(calls) == 3
    for eqn in calls:
        mapping = eqn.params["grid_mapping"]
        assert mapping.grid == (1, 2, 8, 8)
        semantics = eqn.params["compiler_params"].dimension_semantics
        assert tuple(str(s).lower().split(".")[-1] for s in semantics) == (
            "parallel", "parallel", "parallel", "arbitrary")
        for block in mapping.block_mappings:
            sizes = [getattr(dim, "block_size", 0) for dim in block.block_shape]
            assert max(sizes) <= 128, sizes
