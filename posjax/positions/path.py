"""PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating
Householder Transformations"; code: flash-linear-attention, fla/ops/path_attn and
fla/layers/path_attn.py): a data-dependent position encoding made of Householder-like
transforms, one per token.

Every token t emits, per head, a unit vector w_t and a gate beta_t in (0, max_beta], and so
the matrix H_t = I - beta_t w_t w_t^T (symmetric; a reflection at beta = 2, the identity at
beta = 0). Query i sees key j through the product of the transforms between them:
    causal (j <= i):  logit_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(D)
(the key's own H_j excluded, the query's own H_i included, the nearest to the query on the
left). That is fla's convention: its decoding step updates every cached key by the new
token's H (k <- k - beta (k.w) w) before that token attends, and appends the token's own key
untransformed; its naive test reference (test_path_attn.py in its ops tests) builds the same pairs
with a per-chunk UT transform, as here. Softmax is then the usual one.

Encoders (bidirectional; the paper is causal only): built, not refused. The transform H_t
sits on the edge between tokens t-1 and t, and a pair sees the product of the edges on the
path between them, nearest the query first; for a key after the query that is
    j > i:  logit_ij = q_i^T H_{i+1} H_{i+2} ... H_j k_j / sqrt(D),
so the matrix between tokens a < b is always made of H_{a+1..b} and the one seen from b is the
transpose of the one seen from a (logits(q, k) = logits(k, q)^T). The query's own key (j = i)
is seen directly, once.

Computation (the hook `carried_scores`): a key tile is split into chunks of `chunk` tokens;
within a chunk the product of its transforms is held in UT form (I - W^T T W with T upper
triangular, T^-1 = diag(1/beta) + striu(W W^T), by one unit-triangular solve), and since
the inverse of a triangular matrix restricted to a contiguous range is the inverse of the
range, every pair's partial product is a masked piece of the same T. T and the chunk's
w_u.k_j depend on the keys alone: the companion hook `carried_keys` computes them once per
key tile (per token its row of T and of w.k, 2 x chunk wide, after its (w, beta)), and
`carried_scores` reads them for every query block that walks that tile. Each query carries
its vector transported through the keys already passed (the carry), chunk by chunk outward
from the query, as the paper's blockwise algorithm does (fla carries the query the same
way). So the reference path (whole rows) costs O(L^2 (D + chunk)) time and the [L, L]
logits it materializes anyway, and chunked walks each side's key blocks outward from the
query carrying [B, q, H, D]: O(L x block) memory, exact to float tolerance.

Where posjax differs from fla's layer, and why:
  * w and beta read the key vector k_t (a per-token projection of the layer input through
    the head's key weights), not the layer input: attention sees q, k, v only (as FoX here).
    w_t = l2norm(silu(conv(M_h k_t))), M_h a learned [D, D] map per head, conv the short
    causal depthwise convolution of fla's layer (`conv_size` taps, 3 as fla; 1 = none, and
    then no silu either, as fla without it); beta_t = max_beta * sigmoid(u_h . k_t + b_h).
  * the convolution's taps reach only tokens whose positions are consecutive (pos[t-s] =
    pos[t] - s): packed examples, whose positions restart, never read each other (fla cuts
    at cu_seqlens).
  * order: the transforms between two tokens are those of the tokens between them in array
    order within one example, which is the order of positions there; each example must be
    one contiguous run of its row (packing does that) and padding may sit at the row's ends
    only. Padding tokens, other examples and keys outside a local layer's window transform
    nothing for a query (their pairs are masked); positions enter nowhere else, so shifting
    them all changes nothing.
  * no forget gate (fla's optional `use_forget_gate`, FoX's decay): `fox` is its own scheme.
Self-attention only (w, beta are per token of the one sequence). The Pallas kernel refuses
it (its per-forward state and carried scores); `auto` takes the XLA paths: the reference up
to 1024 keys, then rows (CPU, bidirectional: a query block against whole rows, O(block x L))
or chunked. Every path gives the same numbers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError
from posjax.positions.base import Params, Scheme
from posjax.positions.registry import register
from posjax.positions.small_linalg import solve_unit_upper

_HIGHEST = jax.lax.Precision.HIGHEST  # float32 products of the transforms, also on GPU/TPU


def _mm(spec: str, a, b):
    return jnp.einsum(spec, a, b, precision=_HIGHEST, preferred_element_type=jnp.float32)


def householder_tokens(params: Params, k, pos, conv_size: int, max_beta: float):
    """[B, L, H, D + 1] float32: each token's unit vector w_t (first D) and gate beta_t (last)
    per head, from k [B, L, H, D] and positions pos [B, L] (the convolution's taps reach only
    consecutive positions)."""
    kf = k.astype(jnp.float32)
    z = _mm("blhd,hde->blhe", kf, params["w_proj"])
    if conv_size > 1:
        length = z.shape[1]
        taps = params["conv"]  # [H, conv_size, D]: tap s reads token t - s
        out = z * taps[None, None, :, 0]
        for s in range(1, conv_size):
            shifted = jnp.pad(z, [(0, 0), (s, 0), (0, 0), (0, 0)])[:, :length]
            prev = jnp.pad(pos, [(0, 0), (s, 0)], constant_values=-1)[:, :length]
            ok = ((prev == pos - s) & (jnp.arange(length) >= s)[None])[..., None, None]
            out = out + jnp.where(ok, shifted, 0.0) * taps[None, None, :, s]
        z = jax.nn.silu(out)
    w = z * jax.lax.rsqrt(jnp.sum(z * z, -1, keepdims=True) + 1e-6)  # fla's l2_norm
    gate = _mm("blhd,hd->blh", kf, params["beta_proj"]) + params["beta_bias"]
    beta = max_beta * jax.nn.sigmoid(gate)
    return jnp.concatenate([w, beta[..., None]], -1)


def chunk_keys(k, tok, chunk: int):
    """[B, n, H, D + 1 + 2c] float32: the key tile's (w, beta) `tok` [B, n, H, D + 1] with,
    per token, what `transport_scores` needs of its chunk that depends on the keys alone
    (c = min(chunk, n) keys per chunk, the first chunk at the tile's first key, the last
    padded): its row of the chunk's T (the UT transform, T[u, :] for token u: one
    unit-triangular solve per chunk) and its column of w.k (w_u . k_j over the chunk's u for
    key j). Computed once per key tile (the hook `carried_keys`), not per query block."""
    batch, n, heads, dim = k.shape
    c = min(chunk, n)
    m = -(-n // c)
    pad = m * c - n
    kk = jnp.swapaxes(k.astype(jnp.float32), 1, 2)  # [B, H, n, D]
    w = jnp.swapaxes(tok[..., :dim].astype(jnp.float32), 1, 2)
    beta = jnp.swapaxes(tok[..., dim].astype(jnp.float32), 1, 2)  # [B, H, n]
    if pad:  # zero w and beta: the identity, and zero rows and columns of T and w.k
        kk, w = (jnp.pad(x, [(0, 0), (0, 0), (0, pad), (0, 0)]) for x in (kk, w))
        beta = jnp.pad(beta, [(0, 0), (0, 0), (0, pad)])
    kk, w = (x.reshape(batch, heads, m, c, dim) for x in (kk, w))
    beta = beta.reshape(batch, heads, m, c)
    eye = jnp.eye(c, dtype=jnp.float32)
    # T = (I + diag(beta) striu(W W^T))^-1 diag(beta): H_1 ... H_c = I - W^T T W.
    unit = eye + beta[..., :, None] * jnp.triu(_mm("bhmud,bhmtd->bhmut", w, w), 1)
    t = solve_unit_upper(unit, eye * beta[..., None, :])  # [B, H, m, c (u), c (t)]
    wk = _mm("bhmud,bhmjd->bhmju", w, kk)  # [B, H, m, c (key j), c (u)]

    def per_token(x):  # [B, H, m, c, c] -> [B, n, H, c]
        return jnp.swapaxes(x.reshape(batch, heads, m * c, c)[:, :, :n], 1, 2)

    return jnp.concatenate([tok.astype(jnp.float32), per_token(t), per_token(wk)], -1)


def transport_scores(state, k, tok, mask, before: bool, chunk: int):
    """q_i^T (the transforms between i and j) k_j for one side of the queries, and the
    queries carried past these keys.

    state [B, q, H, D] float32: each query transported through the keys nearer to it on this
    side (the query itself before any); k [B, n, H, D] the keys in array order; tok
    [B, n, H, D + 1 + 2c] their `chunk_keys` of this very tile (w, beta, then their rows of
    the chunk's T and w.k); mask [B, 1 or H, q, n] bool, the pairs of this side that may
    attend (their keys are the ones whose transforms a query passes: t on the query's side,
    the query's own token on the side before only); before: the keys at or before the query
    (the transforms H_{j+1..i}), else after it (H_{i+1..j}). Returns raw [B, H, q, n] float32
    and the state after these keys. Chunks of `chunk` keys, outward from the query, each in
    UT form (the module docstring)."""
    batch, n, heads, dim = k.shape
    c = min(chunk, n)
    if tok.shape[-1] != dim + 1 + 2 * c:
        raise ValueError(f"PaTH's key tokens of a tile of {n} keys are [..., {dim + 1 + 2 * c}] "
                         f"(chunk_keys of that tile: the hook carried_keys), not {tok.shape}")
    m = -(-n // c)
    pad = m * c - n
    s = jnp.swapaxes(state.astype(jnp.float32), 1, 2)  # [B, H, q, D]
    kk = jnp.swapaxes(k.astype(jnp.float32), 1, 2)  # [B, H, n, D]
    tok = jnp.swapaxes(tok.astype(jnp.float32), 1, 2)  # [B, H, n, D + 1 + 2c]
    w, t, wk = tok[..., :dim], tok[..., dim + 1:dim + 1 + c], tok[..., dim + 1 + c:]
    mask = jnp.broadcast_to(mask, (batch, mask.shape[1]) + mask.shape[2:])
    if pad:  # zero w: the identity, and no key; masked
        kk, w, t, wk = (jnp.pad(x, [(0, 0), (0, 0), (0, pad), (0, 0)]) for x in (kk, w, t, wk))
        mask = jnp.pad(mask, [(0, 0), (0, 0), (0, 0), (0, pad)])

    def chunks(x, axis):  # [..., m * c, ...] at `axis` -> [m, ..., c, ...]
        x = x.reshape(x.shape[:axis] + (m, c) + x.shape[axis + 1:])
        return jnp.moveaxis(x, axis, 0)

    xs = (chunks(kk, 2), chunks(w, 2), chunks(t, 2), chunks(wk, 2), chunks(mask, 3))
    idx = jnp.arange(c)
    # Key-side range of a pair inside one chunk, [key j, u]: the transforms strictly after
    # key j (side before: u > j), or up to and including key j (side after: u <= j).
    key_side = (idx[None, :] > idx[:, None]) if before else (idx[None, :] <= idx[:, None])

    def step(s, x):
        kc, wc, tc, wkc, mc = x  # tc [B, H, u, t]: T; wkc [B, H, j, u]: w_u . k_j
        sw = jnp.where(mc, _mm("bhqd,bhtd->bhqt", s, wc), 0.0)  # transforms the query passes
        wkc = jnp.where(key_side, wkc, 0.0)
        # side before: sum over u <= t of (s.w_t) T[u,t] (w_u.k_j); after: (s.w_u) T[u,t] (w_t.k_j)
        st = _mm("bhqt,bhut->bhqu", sw, tc) if before else _mm("bhqu,bhut->bhqt", sw, tc)
        raw = _mm("bhqd,bhjd->bhqj", s, kc) - _mm("bhqu,bhju->bhqj", st, wkc)
        return s - _mm("bhqu,bhud->bhqd", st, wc), raw

    s, raw = jax.lax.scan(step, s, xs, reverse=before)
    raw = jnp.moveaxis(raw, 0, 3).reshape(batch, heads, s.shape[2], m * c)[..., :n]
    return raw, jnp.swapaxes(s, 1, 2)


@register
@dataclasses.dataclass(frozen=True)
class Path(Scheme):
    """PaTH attention; see the module docstring.

    Fields: conv_size (3, as fla: the short causal convolution of w's projection; 1 = none),
    max_beta (2.0, as fla: beta in (0, 2), negative eigenvalues allowed; 1.0 keeps every
    transform a contraction), chunk (64, as fla's BS: the keys per UT block).
    """

    name: ClassVar[str] = "path"
    no_decay: ClassVar[tuple[str, ...]] = ("beta_bias",)

    conv_size: int = 3
    max_beta: float = 2.0
    chunk: int = 64

    def __post_init__(self):
        for field, lowest in (("conv_size", 1), ("chunk", 1)):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
                self.fail(field, value, f"an int >= {lowest}")
        if (not isinstance(self.max_beta, (int, float)) or isinstance(self.max_beta, bool)
                or not 0 < self.max_beta <= 2):
            self.fail("max_beta", self.max_beta,
                      "a number in (0, 2] (beta = max_beta * sigmoid: 2 allows reflections)")

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        h, d = dims.num_heads, dims.head_dim
        r1, r2, r3 = jax.random.split(rng, 3)
        bound = 1.0 / math.sqrt(self.conv_size)  # torch's depthwise Conv1d default, as fla
        return {
            "w_proj": jax.random.normal(r1, (h, d, d), jnp.float32) / math.sqrt(d),
            "conv": jax.random.uniform(r2, (h, self.conv_size, d), jnp.float32, -bound, bound),
            "beta_proj": 0.02 * jax.random.normal(r3, (h, d), jnp.float32),
            "beta_bias": jnp.zeros((h,), jnp.float32),  # beta = max_beta / 2 at init
        }

    def prepare(self, params, q, k, v, q_pos, k_pos):
        del v, q_pos
        if q.shape[1] != k.shape[1]:
            raise ConfigError("q.shape", q.shape, f"self-attention for position 'path' (the "
                              f"same {k.shape[1]} tokens as the keys: w, beta are per token)")
        return None, householder_tokens(params, k, k_pos, self.conv_size, self.max_beta)

    def carried_scores(self, params, carry, k, q_tok, k_tok, mask, q_pos, k_pos, before):
        del params, q_tok, q_pos, k_pos
        return transport_scores(carry, k, k_tok, mask, before, self.chunk)

    def carried_keys(self, params, k, k_tok):
        del params
        return chunk_keys(k, k_tok, self.chunk)
