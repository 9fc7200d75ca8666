"""The lean attention path (posjax.attention.lean) against the reference: values and gradients
with padding, packed segments, causal masks, fully masked rows and no mask at all; with
position hooks on the logits and values (NEZHA, T5) and on q, k (RoPE); and in the model, a
prebuilt per-forward mask and `dense_rows` give the reference's outputs.

One jit per (case, implementation) returning output and gradients together; tiny shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import models, positions
from posjax.attention import attend, lean
from posjax.positions.base import Dims

from tests.models.support import make_batch, model_config

B, L, H, D = 2, 12, 2, 8
TOL = dict(rtol=1e-4, atol=1e-5)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=(B, L, H, D)).astype(np.float32)) for _ in range(3)]


def _masks(kind):
    """(positions, kv_mask, segment_ids, causal) for a masking case."""
    pos = np.tile(np.arange(L, dtype=np.int32), (B, 1))
    if kind == "none":
        return pos, None, None, False
    seg = np.ones((B, L), np.int32)
    seg[0, 5:] = 2  # two packed examples in row 0
    pos[0, 5:] = np.arange(L - 5)
    seg[1, 9:] = 0  # padding in row 1: its padded queries attend nothing
    pos, seg = jnp.asarray(pos), jnp.asarray(seg)
    return pos, seg > 0, (seg, seg), kind == "causal"


def _out_and_grads(implementation, scheme, params, kind):
    pos, kv_mask, segs, causal = _masks(kind)

    def loss(q, k, v, params):
        out = attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                     kv_mask=kv_mask, segment_ids=segs, causal=causal,
                     implementation=implementation)
        return jnp.sum(jnp.sin(out) * jnp.arange(D)), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(
        *_inputs(), params)
    return out, grads


@pytest.mark.slow
@pytest.mark.parametrize("name,kind", [
    ("learned", "none"), ("learned", "padded"), ("learned", "causal"),
    ("nezha", "padded"), ("t5", "padded"), ("rope", "causal"),
])
def test_lean_equals_reference_values_and_gradients(name, kind):
    scheme = positions.make({"name": name}).bind(Dims(num_heads=H, head_dim=D, hidden=H * D,
                                                           max_length=64))
    params = scheme.init_layer(jax.random.PRNGKey(0))
    out_lean, g_lean = _out_and_grads("lean", scheme, params, kind)
    out_ref, g_ref = _out_and_grads("reference", scheme, params, kind)
    np.testing.assert_allclose(out_lean, out_ref, **TOL)
    for a, b in zip(jax.tree.leaves(g_lean), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, **TOL)
    if kind == "padded":  # padded queries: exactly zero output, finite gradients
        assert np.all(np.asarray(out_lean)[1, 9:] == 0)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(g_lean))


def test_build_mask_is_none_without_masks_and_matches_tile_mask():
    pos, kv_mask, segs, _ = _masks("padded")
    assert lean.build_mask(pos, pos, None, None, False) is None
    m = lean.build_mask(pos, pos, kv_mask, segs, True)
    assert m.bias.shape == (B, 1, L, L) and m.row_ok.shape == (B, 1, L, 1)
    allowed = np.asarray(m.bias) == 0
    assert not allowed[1, 0, 9:].any() and np.asarray(m.row_ok)[1, 0, 9:, 0].sum() == 0
    assert allowed[0, 0, 6, 5] and not allowed[0, 0, 6, 4]  # same segment only
    assert not allowed[0, 0, 2, 3]  # causal


@pytest.mark.slow
def test_model_lean_path_and_dense_rows_equal_reference():
    batches = {"packed": make_batch(segments=[10, 6]), "padded": make_batch(real=11),
               "dense": make_batch()}
    outs = {}
    for impl in ("reference", "lean"):
        model = models.build_model(model_config("nezha", attention=impl, dropout=0.0),
                                   nnx.Rngs(0))
        for name, batch in batches.items():
            outs[impl, name] = model(batch)["mlm_logits"]
        outs[impl, "dense_rows"] = model(batches["dense"], dense_rows=True)["mlm_logits"]
    for name in (*batches, "dense_rows"):
        np.testing.assert_allclose(outs["lean", name], outs["reference", name], **TOL)
    np.testing.assert_allclose(outs["lean", "dense_rows"], outs["reference", "dense"], **TOL)
