"""The compiled CPU library's ops (posjax.attention.native) for the model's layers, on one CPU
device in float32: a dense product whose weight gradient's operand the library transposes, and
the layer norm. Elsewhere (meshes, other backends, no compiler) the layers keep XLA's forms,
which compute the same numbers.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp

from posjax.attention import native


def usable(x) -> bool:
    """Whether the compiled library's ops run for float32 x here: on CPU with the library
    built (native.transpose_usable), on one device (a custom call under a mesh would run
    whole: with several devices and no mesh in context, the inputs might be split all the
    same)."""
    mesh = jax.sharding.get_abstract_mesh()
    one_device = mesh.size == 1 if not mesh.empty else jax.device_count() == 1
    return one_device and native.transpose_usable(x)


def dense_usable(x, kernel) -> bool:
    """Whether `dense` runs this product (float32 operands, `usable`)."""
    return kernel.dtype == jnp.float32 and usable(x)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def dense(x, kernel, n: int) -> jax.Array:
    """tensordot(x, kernel, n) in float32 on CPU, as mixed.contract_last, with the weight
    gradient's operand transposed by native.transpose instead of XLA's transpose.

    Why: the weight gradient x^T g sums over the tokens, the leading axis of both operands,
    a form YNNPACK declines; mixed transposes the smaller operand for it, and XLA fuses the
    layer norm that produced x into that transpose, which then ran ~8x slower than the
    transpose alone ([10240, 64]: 3.6 vs 0.5 ms), 10% of the small-model step's op time
    (bench/README.md, "Small-model step"). The custom call fuses nothing: x is materialized
    once, then transposed in blocks. Same products, same operand layouts, float32 throughout.
    """
    return _dense_fwd(x, kernel, n)[0]


def _flat(x, kernel, n: int):
    """(x [tokens, in], kernel [in, out]) of the product: reshapes only."""
    inner = math.prod(kernel.shape[:n])
    return x.reshape(-1, inner), kernel.reshape(inner, -1)


def _dense_fwd(x, kernel, n: int):
    x2, w2 = _flat(x, kernel, n)
    y = jnp.dot(x2, w2, preferred_element_type=jnp.float32)
    return y.reshape(*x.shape[:x.ndim - n], *kernel.shape[n:]), (x, kernel)


def _dense_bwd(n: int, residuals, g):
    x, kernel = residuals
    x2, w2 = _flat(x, kernel, n)
    g2 = g.reshape(x2.shape[0], w2.shape[1])
    dx = jnp.einsum("tf,ef->te", g2, w2, preferred_element_type=jnp.float32)
    if x2.shape[1] <= g2.shape[1]:  # transpose the smaller operand, as mixed does
        dw = jnp.dot(native.transpose(x2), g2, preferred_element_type=jnp.float32)
    else:
        dw = native.transpose(jnp.dot(native.transpose(g2), x2,
                                      preferred_element_type=jnp.float32))
    return dx.reshape(x.shape), dw.reshape(kernel.shape)


dense.defvjp(_dense_fwd, _dense_bwd)


def layer_norm(x: jax.Array, scale: jax.Array, bias: Optional[jax.Array],
               eps: float) -> jax.Array:
    """(x - mean) * rsqrt(var + eps) * scale (+ bias) over the last axis of float32 x, any
    leading shape, in float32 (native.layer_norm: one pass per row, forward and back)."""
    bias = jnp.zeros_like(scale) if bias is None else bias.astype(jnp.float32)
    y = native.layer_norm(x.reshape(-1, x.shape[-1]), scale, bias, eps)
    return y.reshape(x.shape)
