"""Matrix products for mixed precision: inputs in the compute dtype, products accumulated in
float32, forward AND backward.

`einsum(spec, a, b)` returns float32. For float32 inputs it is plain jnp.einsum. For bf16
inputs the forward is a bf16 x bf16 dot with a float32 result; a plain einsum's autodiff would
then feed the float32 cotangent to the backward dots, which promotes their bf16 operand to
float32, so two thirds of the training FLOPs would run in float32. The custom VJP rounds the
cotangent to the input dtype once, so both backward dots are bf16 x bf16 with float32
accumulation as well (the usual mixed-precision recipe: the gradient leaves in the input's
dtype, parameters and their updates stay float32 outside).

XLA:CPU runs a bf16 x bf16 -> f32 dot only inside a YNNPACK fusion; a dot that YNNPACK
declines (an operand transposed, a vector, every dim < 8; see XLA's IsDotSupportedByYnn)
falls back to a runtime that raises "Unsupported element type for DotThunk: BF16 x BF16 = F32"
when the step RUNS, not when it compiles. So on CPU each bf16 product is written as a canonical
batched matmul [batch, M, K] x [batch, K, N], its operands and result transposed explicitly
behind optimization barriers (XLA would otherwise fold the transposes back into the dot), and a
product too small or thin for YNNPACK is computed in float32. Under a multi-device mesh a product
with several batch axes keeps them separate (see `_product`: merged, they cannot be split).

Float32 on CPU has the opposite problem: every product runs in float32, but a weight
gradient (x^T g, summed over the tokens) has the summed axis FIRST in both operands, and XLA
then emits a dot that YNNPACK declines (lhs contracted on its leading axis), which runs on a
slower fallback. `_f32_cpu` writes such a product with the smaller operand explicitly
transposed so that the summed axes come last (behind a barrier, or XLA folds the transpose
back in); products that already have an operand in that form stay plain einsums, fused
as XLA likes. Same products, same float32 accumulation, only the operand layout differs.

Used by the Dense layers and the tied MLM head (posjax.models) and by the attention einsums.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp


def einsum(spec: str, a: jax.Array, b: jax.Array) -> jax.Array:
    """jnp.einsum(spec, a, b) accumulated and returned in float32 (a, b of one dtype).

    `spec` is an explicit two-operand spec ('ab,bc->ac'), no ellipsis, no index repeated
    within an operand, every index of an operand in the other operand or the output.
    """
    if a.dtype == jnp.float32 and b.dtype == jnp.float32:
        if jax.default_backend() != "cpu":
            return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)
        return _f32_cpu(spec, a, b)
    return _mixed(spec, a, b)


def _parse(spec: str):
    """(sa, sb, out, batch, free_a, free_b, contract) letters of a two-operand spec."""
    inputs, out = spec.split("->")
    sa, sb = inputs.split(",")
    batch = [c for c in out if c in sa and c in sb]
    free_a = [c for c in sa if c in out and c not in sb]
    free_b = [c for c in sb if c in out and c not in sa]
    contract = [c for c in sa if c in sb and c not in out]
    return sa, sb, out, batch, free_a, free_b, contract


def _summed_last(letters: str, batch, contract) -> bool:
    """Whether an operand, its batch axes aside (XLA moves those to the front itself), has the
    summed axes last: the form of a matmul's lhs that YNNPACK takes."""
    rest = [c for c in letters if c not in batch]
    return bool(contract) and set(rest[len(rest) - len(contract):]) == set(contract)


def _ynn_form(spec: str, a, b):
    """jnp.einsum(spec, a, b) for float32, with an operand transposed to put the summed axes
    last when neither has them there (module docstring)."""
    sa, sb, out, batch, free_a, free_b, contract = _parse(spec)
    if (not contract or not free_a or not free_b or _summed_last(sa, batch, contract)
            or _summed_last(sb, batch, contract)):
        return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)
    if b.size < a.size:  # transpose the smaller operand; it becomes the lhs
        sa, sb, a, b, free_a, free_b = sb, sa, b, a, free_b, free_a
    lhs_order = batch + free_a + contract
    lhs = jax.lax.optimization_barrier(jnp.einsum(f"{sa}->{''.join(lhs_order)}", a))
    n = len(batch)
    dims = ((tuple(range(n + len(free_a), len(lhs_order))), tuple(sb.index(c) for c in contract)),
            (tuple(range(n)), tuple(sb.index(c) for c in batch)))
    y = jax.lax.dot_general(lhs, b, dims, preferred_element_type=jnp.float32)
    # dot_general's result: batch, the lhs's free axes, then the rhs's free axes in b's order.
    got = "".join(batch + free_a + [c for c in sb if c in free_b])
    if got == out:
        return y
    # Behind a barrier too: XLA would fold this transpose into the dot by swapping its
    # operands, which transposes them again.
    return jnp.einsum(f"{got}->{out}", jax.lax.optimization_barrier(y))


def _with_transposed_vjp(product):
    """`product` (spec, a, b) -> float32 as a custom-VJP function whose backward is `product`
    again on the two transposed specs, the cotangent rounded once to the input dtype (module
    docstring; a no-op for float32)."""

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def f(spec, a, b):
        return product(spec, a, b)

    def fwd(spec, a, b):
        return product(spec, a, b), (a, b)

    def bwd(spec, res, ct):
        a, b = res
        sa, sb, out = _parse(spec)[:3]
        g = ct.astype(a.dtype)
        # Every index of a is in b or out and vice versa (no index summed away inside one
        # operand), so these two products are the exact transposes.
        da = product(f"{out},{sb}->{sa}", g, b)
        db = product(f"{sa},{out}->{sb}", a, g.astype(b.dtype))
        return da.astype(a.dtype), db.astype(b.dtype)

    f.defvjp(fwd, bwd)
    return f


_f32_cpu = _with_transposed_vjp(_ynn_form)


def _product(spec: str, a, b):
    """One bf16-in, float32-out product; on CPU in the form YNNPACK takes (module docstring)."""
    if jax.default_backend() != "cpu":
        return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)
    sa, sb, out, batch, free_a, free_b, contract = _parse(spec)
    size = {**dict(zip(sa, a.shape)), **dict(zip(sb, b.shape))}
    m, n, k = (math.prod(size[c] for c in group) for group in (free_a, free_b, contract))
    nb = math.prod(size[c] for c in batch)
    if m == 1 or n == 1 or max(m, n, k) < 8:
        return jnp.einsum(spec, a.astype(jnp.float32), b.astype(jnp.float32))
    # Under a multi-device mesh, several batch axes stay separate axes: an attention
    # product's [batch, heads] is split over ('data', 'fsdp') and 'tensor', and merged into
    # one axis here, before the SPMD partitioner, it is an axis the partitioner cannot split,
    # so it gathered q, k, v and the probabilities across 'tensor' in every layer (~290 MiB
    # per BERT-base step on 2x2x2). The price: XLA:CPU runs a bf16 product with
    # two batch axes on float32 copies of its operands (same products, float32
    # accumulation either way). One device keeps the merged bf16 form.
    mesh = jax.sharding.get_abstract_mesh()
    bshape = [nb]
    if len(batch) > 1 and not mesh.empty and mesh.size > 1:
        bshape = [size[c] for c in batch]
    nbd = len(bshape)
    a2 = jnp.einsum(f"{sa}->{''.join(batch + free_a + contract)}", a).reshape(*bshape, m, k)
    b2 = jnp.einsum(f"{sb}->{''.join(batch + contract + free_b)}", b).reshape(*bshape, k, n)
    a2, b2 = jax.lax.optimization_barrier((a2, b2))
    bd = tuple(range(nbd))
    y = jax.lax.dot_general(a2, b2, (((nbd + 1,), (nbd,)), (bd, bd)),
                            preferred_element_type=jnp.float32)
    # Behind a barrier too: XLA folds a transpose of the result into the dot by swapping
    # its operands, which transposes them again.
    y = jax.lax.optimization_barrier(y).reshape([size[c] for c in batch + free_a + free_b])
    return jnp.einsum(f"{''.join(batch + free_a + free_b)}->{out}", y)


_mixed = _with_transposed_vjp(_product)


def contract_last(x: jax.Array, w: jax.Array, n: int) -> jax.Array:
    """tensordot(x, w, n) in float32 via `einsum`: the last n axes of x with the first n of w."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    free_x = letters[: x.ndim - n]
    shared = letters[x.ndim - n : x.ndim]
    free_w = letters[x.ndim : x.ndim + w.ndim - n]
    return einsum(f"{free_x}{shared},{shared}{free_w}->{free_x}{free_w}", x, w)
