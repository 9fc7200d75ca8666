"""Small batched linear algebra in products and elementwise ops only: the exponential of
skew-symmetric matrices (LieRE, ComRoPE), the Cayley solve (STRING) and unit triangular
solves (PaTH).

Why not jax.scipy.linalg.expm, jnp.linalg.solve or jax.scipy.linalg.solve_triangular: on CPU
they run LAPACK (getrf, trsm) through jaxlib's batched kernels, which fan a large batch out
over XLA's intra-op thread pool from a thread of that same pool and wait for it. With two
such calls in flight (two layers, or a forward and a backward) every pool thread can end up
waiting on work queued behind it: a 2-core training run of `comrope` hung for good, every
thread asleep. The batched 4 x 4 LU is slow besides (a gradient of expm over 32k blocks:
1.5 s). The forms below hold to float32 rounding for the matrices the schemes build
(tests/positions/test_small_linalg.py checks values and gradients against jax's).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

TAYLOR_DEGREE = 8  # at norm <= 1/2 the remainder is below 1e-8 relative
MAX_SQUARINGS = 24  # norms up to 2^23: past any angle float32 can still tell apart


def _product(a: jax.Array, b: jax.Array) -> jax.Array:
    """a @ b over batches of small matrices: up to 8 x 8 as one fused multiply-and-sum (XLA's
    batched dot runs each 4 x 4 product on its own: 7x slower over 32k blocks)."""
    if a.shape[-1] <= 8:
        return (a[..., :, :, None] * b[..., None, :, :]).sum(axis=-2)
    return jnp.matmul(a, b)


def expm_skew(a: jax.Array) -> jax.Array:
    """exp(a) for skew-symmetric a [..., n, n] (float32): each matrix scaled by 2^-s to
    infinity-norm at most 1/2, a degree-TAYLOR_DEGREE Taylor series, then squared s times
    (its own s: squarings past a matrix's s leave it as it is; past the batch's largest s
    none run). The result is a rotation; for a skew matrix ||a||_2 <= ||a||_inf."""
    a = a.astype(jnp.float32)
    n = a.shape[-1]
    norm = jnp.max(jnp.sum(jnp.abs(a), axis=-1), axis=-1)
    s = jnp.clip(jnp.ceil(jnp.log2(jnp.maximum(norm, 1e-30) * 2.0)), 0, MAX_SQUARINGS)
    x = a * jnp.exp2(-s)[..., None, None]
    eye = jnp.broadcast_to(jnp.eye(n, dtype=jnp.float32), a.shape)
    r = eye
    for k in range(TAYLOR_DEGREE, 0, -1):  # Horner: I + x (I + x/2 (I + x/3 (...)))
        r = eye + _product(x, r) / k
    most = jnp.max(s) if s.ndim else s
    for i in range(MAX_SQUARINGS):
        r = jax.lax.cond(i < most, lambda r, i=i: jnp.where((i < s)[..., None, None],
                                                            _product(r, r), r),
                         lambda r: r, r)
    return r


@jax.custom_vjp
def solve_eye_plus_skew(s: jax.Array, b: jax.Array) -> jax.Array:
    """(I + s)^-1 b for skew-symmetric s [..., n, n] and b [..., n, m] (float32), by
    Gauss-Jordan elimination without pivoting: every leading block of I + s is I plus a skew
    matrix, whose eigenvalues 1 + i*lambda are never 0, so no pivot is. The gradient is the
    solve's own (b: (I + s)^-T g = (I - s)^-1 g, s: minus that times x^T), so the backward
    keeps x, not the elimination's steps."""
    return _gauss_jordan(s, b)


def _gauss_jordan(s, b):
    s, b = s.astype(jnp.float32), b.astype(jnp.float32)
    n = s.shape[-1]
    aug = jnp.concatenate([jnp.eye(n, dtype=jnp.float32) + s, b], axis=-1)

    def step(k, aug):
        row = jax.lax.dynamic_index_in_dim(aug, k, axis=-2, keepdims=False)  # [..., n + m]
        row = row / jax.lax.dynamic_index_in_dim(row, k, axis=-1, keepdims=True)
        col = jax.lax.dynamic_index_in_dim(aug, k, axis=-1, keepdims=True)  # [..., n, 1]
        is_k = (jnp.arange(n) == k)[:, None]
        return jnp.where(is_k, row[..., None, :], aug - col * row[..., None, :])

    return jax.lax.fori_loop(0, n, step, aug)[..., n:]


def _gauss_jordan_fwd(s, b):
    x = _gauss_jordan(s, b)
    return x, (s, x)


def _gauss_jordan_bwd(res, g):
    s, x = res
    gb = _gauss_jordan(jnp.swapaxes(s, -1, -2), g)  # (I + s)^-T = (I + s^T)^-1
    return -jnp.matmul(gb, jnp.swapaxes(x, -1, -2)), gb


solve_eye_plus_skew.defvjp(_gauss_jordan_fwd, _gauss_jordan_bwd)


@jax.custom_vjp
def solve_unit_upper(u: jax.Array, b: jax.Array) -> jax.Array:
    """u^-1 b for unit upper triangular u [..., n, n] (its diagonal and lower part are not
    read: taken as 1 and 0) and b [..., n, m], by back substitution, last row first. The
    gradient is the solve's own (b: u^-T g, a unit lower solve; u: minus that times x^T,
    strictly upper), so the backward keeps x, not each substitution's step."""
    return _back_substitute(u, b)


def _back_substitute(u, b):
    n = u.shape[-1]
    strict = jnp.triu(u, 1)

    def step(i, x):
        row = n - 1 - i
        above = jax.lax.dynamic_index_in_dim(strict, row, axis=-2, keepdims=True)  # [..., 1, n]
        value = jax.lax.dynamic_index_in_dim(b, row, axis=-2, keepdims=True) - jnp.matmul(above, x)
        return jax.lax.dynamic_update_index_in_dim(x, value, row, axis=-2)

    return jax.lax.fori_loop(0, n, step, b)


def _back_substitute_fwd(u, b):
    x = _back_substitute(u, b)
    return x, (u, x)


def _back_substitute_bwd(res, g):
    u, x = res
    # u^T is unit lower; reversing rows and columns makes it unit upper
    flip = jnp.flip(jnp.swapaxes(u, -1, -2), axis=(-2, -1))
    gb = jnp.flip(_back_substitute(flip, jnp.flip(g, axis=-2)), axis=-2)
    return -jnp.triu(jnp.matmul(gb, jnp.swapaxes(x, -1, -2)), 1), gb


solve_unit_upper.defvjp(_back_substitute_fwd, _back_substitute_bwd)
