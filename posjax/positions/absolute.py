"""Absolute position schemes: a vector per position, merged into the token embeddings once.

All schemes here fill only the `embed(params, x, pos, ids)` hook (NoPosition fills none).
Position vectors are computed in float32 (or the table's dtype when that is wider) and cast
to the dtype of `x` only for the final merge, so bf16 runs keep exact angles and table rows.

Range checks have two layers, because a JAX gather CLAMPS out-of-range indices silently:
  * `check(dims, length)` raises ConfigError before compile when `length` is too long;
  * inside jit every table lookup uses `take_rows`, which returns NaN rows for any index
    outside the table (negative ones included), so a position that slips past `check`
    poisons the loss (NaN guards catch it) instead of silently reusing the last row.

Complex order embeddings live in `complex_order.py` (they reuse this module's helpers).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.errors import ConfigError
from posjax.positions import tables
from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.extension import Extension, ExtendSettings, NotApplicable
from posjax.positions.registry import register

BERT_INIT_STD = 0.02  # BERT's initializer_range: truncated normal, std 0.02, cut at 2 std


# --------------------------------------------------------------------------------------
# Pure functions
# --------------------------------------------------------------------------------------
def sinusoidal_embedding(pos: jax.Array, dim: int, base: float = 10000.0) -> jax.Array:
    """Vaswani et al. (2017) sinusoids at arbitrary positions: `pos [...]` -> `[..., dim]`.

    Convention (INTERLEAVED, as in the paper and bert4keras `sinusoidal_embeddings`):
        out[..., 2j]   = sin(pos * base**(-2j/dim))
        out[..., 2j+1] = cos(pos * base**(-2j/dim)),   j = 0 .. dim/2 - 1.
    tensor2tensor / flax examples use the HALF-SPLIT layout [sin(all j) | cos(all j)]
    instead: same numbers, permuted columns, so checkpoints do not mix without a permute.
    Angles are float32 even for bf16 models (bf16 cannot tell position 257 from 256).
    """
    if dim <= 0 or dim % 2:
        raise ConfigError("dim", dim, "a positive even number: sin and cos fill pairs of dims")
    j = np.arange(dim // 2, dtype=np.float64)
    inv_freq = jnp.asarray(base ** (-2.0 * j / dim), jnp.float32)
    angles = jnp.asarray(pos, jnp.float32)[..., None] * inv_freq
    out = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., dim/2, 2]
    return out.reshape(*out.shape[:-2], dim)


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> jax.Array:
    """`[length, dim]` float32 table of `sinusoidal_embedding` at positions 0..length-1."""
    return sinusoidal_embedding(jnp.arange(length), dim, base)


def take_rows(table: jax.Array, index: jax.Array) -> jax.Array:
    """`table[index]` with NaN rows for ANY out-of-range index, never clamping or wrapping.

    `jnp.take(mode='fill')` alone still wraps negative indices (-1 -> last row), so those
    are first moved past the end of the table.
    """
    rows = table.shape[0]
    index = jnp.where(index < 0, rows, index)
    return jnp.take(table, index, axis=0, mode="fill", fill_value=jnp.nan)


def hierarchical_embedding(table: jax.Array, pos: jax.Array, alpha: float = 0.4) -> jax.Array:
    """Su's hierarchical decomposition of a learned table, evaluated at `pos [...]` only.

    With n = table rows, u = (P - a*P[0]) / (1-a) and q[k] = a*u[k//n] + (1-a)*u[k%n]
    (bert4keras layers.py PositionEmbedding, `hierarchical=`). Two gathers per position:
    O(len(pos) * E), never the n*n table. Positions >= n*n (or < 0) give NaN rows.
    """
    n = table.shape[0]
    dtype = jnp.promote_types(table.dtype, jnp.float32)
    p = table.astype(dtype)
    pos = jnp.asarray(pos)
    # k // n and k % n for negative k would be in range: send those to a NaN row too.
    hi = jnp.where(pos < 0, n, pos // n)
    lo = pos % n
    u = lambda rows: (rows - alpha * p[0]) / (1.0 - alpha)  # noqa: E731
    out = alpha * u(take_rows(p, hi)) + (1.0 - alpha) * u(take_rows(p, lo))
    # Below n the formula equals P[k] only up to rounding; use the row itself there, so a
    # learned checkpoint run as 'hierarchical' gives bit-identical numbers inside its table.
    return jnp.where(((pos >= 0) & (pos < n))[..., None], take_rows(p, pos), out)


def hierarchical_table(table: jax.Array, length: int, alpha: float = 0.4) -> jax.Array:
    """`[length, E]` hierarchical rows 0..length-1 (length <= n*n) of a learned `table [n, E]`.

    Reproduces `table[k]` for k < n (up to float rounding) and reaches n*n positions.
    """
    n = table.shape[0]
    if not 0 <= length <= n * n:
        raise ConfigError("length", length, f"0..{n * n} (= rows**2) for a table of {n} rows")
    _check_alpha(alpha)
    return hierarchical_embedding(table, jnp.arange(length), alpha)


def _check_alpha(alpha) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ConfigError("position.alpha", alpha, "a number in (0, 1), e.g. 0.4")
    if alpha == 0.5:
        raise ConfigError(
            "position.alpha",
            alpha,
            "any value in (0, 1) except 0.5: with a = 1-a the rows of (i, j) and (j, i) coincide",
        )


def _bert_table(rng: jax.Array, rows: int, width: int) -> jax.Array:
    """BERT's position table init: truncated normal (cut at 2 std), std 0.02, float32."""
    return BERT_INIT_STD * jax.random.truncated_normal(rng, -2.0, 2.0, (rows, width), jnp.float32)


def _check_positive_int(scheme: Scheme, field: str, value, allowed: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        scheme.fail(field, value, allowed)


def _check_even_width(dims: Dims, why: str) -> None:
    if dims.embed_width % 2:
        raise ConfigError(dims.embed_field, dims.embed_width, f"an even embedding width: {why}")


# --------------------------------------------------------------------------------------
# Schemes
# --------------------------------------------------------------------------------------
@register
@dataclasses.dataclass(frozen=True)
class NoPosition(Scheme):
    """No position information at all (NoPE). Fills no hook; for encoders the model is then
    permutation-equivariant, for causal LMs the mask alone carries order."""

    name = "none"


@register
@dataclasses.dataclass(frozen=True)
class Learned(Scheme):
    """BERT's learned absolute table, added to the token embeddings.

    rows: table rows; None = dims.max_length. Positions must be < rows.
    """

    name = "learned"
    rows: Optional[int] = None

    bounded: ClassVar[bool] = True
    extend_methods: ClassVar[dict] = {
        "hierarchical": "Su's decomposition of the first n = min(T, rows) rows: n*n positions, "
                        "rows below n unchanged (alpha, default 0.4)",
        **tables.TABLE_METHODS,
    }
    default_extension: ClassVar[str] = "hierarchical"
    extend_refusal: ClassVar[str] = "{method} extends a learned table; position '{scheme}' has none"

    def __post_init__(self):
        _check_positive_int(self, "rows", self.rows, "None (= model.max_length) or an int >= 1")

    def table_rows(self, dims: Dims) -> int:
        return dims.max_length if self.rows is None else self.rows

    def kept_fields(self) -> dict:
        """The table keeps its trained rows when model.max_length grows."""
        return {"rows": self.table_rows(self.bound_dims)} if self.rows is None else {}

    def extend(self, method: str, length: int, trained_length: Optional[int] = None,
               settings: ExtendSettings = ExtendSettings()) -> Extension:
        """The first n = min(T, rows) trained rows (n = rows when T is None) as a hierarchical
        table, or extended to `length` rows by a table method (positions/tables.py)."""
        if method not in self.extend_methods:
            return super().extend(method, length, trained_length, settings)
        table_rows = self.table_rows(self.bound_dims)
        rows = table_rows if trained_length is None else min(trained_length, table_rows)
        if method == "hierarchical":
            alpha = 0.4 if settings.alpha is None else float(settings.alpha)
            if length > rows * rows:
                raise NotApplicable(
                    f"hierarchical on {rows} rows reaches {rows * rows} positions < {length}",
                    allowed=f"<= rows**2 = {rows * rows} for a hierarchical table of {rows} rows")
            cut = None if rows >= table_rows else (
                lambda params: {**params, "table": params["table"][:rows]})
            return Extension({"name": "hierarchical", "rows": rows, "alpha": alpha}, replace=True,
                             embed_rewrite=cut, details={"rows": rows, "alpha": alpha})
        if length <= rows:  # inside the trained rows: the model as it is
            return Extension(self.kept_fields(), details={"rows": rows})

        def grow(params):
            table = jax.device_get(params["table"])[:rows]
            return {**params, "table": jnp.asarray(tables.extend(table, length, method))}

        return Extension({"name": "learned", "rows": int(length)}, replace=True,
                         embed_rewrite=grow, details={"rows": rows})

    def init_embed(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        return {"table": _bert_table(rng, self.table_rows(dims), dims.embed_width)}

    def check(self, dims: Dims, length: int) -> None:
        rows = self.table_rows(dims)
        if length > rows:
            hint = (
                f", or use name='hierarchical' to reach rows**2 = {rows * rows} positions "
                "with the same table"
                if self.name == "learned"
                else ""
            )
            self.fail(
                "rows",
                rows,
                f"at least the {length} positions asked for (the table has no row past "
                f"{rows - 1}); raise position.rows / model.max_length and retrain{hint}",
            )

    def vectors(self, params: Params, pos: jax.Array) -> jax.Array:
        return take_rows(params["table"], pos)

    def embed(self, params: Params, x: jax.Array, pos: jax.Array, ids=None) -> jax.Array:
        del ids
        return x + self.vectors(params, pos).astype(x.dtype)


@register
@dataclasses.dataclass(frozen=True)
class Hierarchical(Learned):
    """A learned table of n rows stretched to n*n positions by Su's hierarchical decomposition.

    Parameters and init are exactly those of `learned`, so a trained `learned` table loads
    as-is: positions < n then give the same vectors, longer ones a*u[k//n] + (1-a)*u[k%n].

    rows: n, the table size; None = model.max_length. To stretch a pretrained 512-row BERT
        table to 8k, set rows=512 explicitly (max_length is then the longer target length).
    alpha: in (0, 1), not 0.5; 0.4 as bert4keras.
    """

    name = "hierarchical"
    rows: Optional[int] = None
    alpha: float = 0.4

    def __post_init__(self):
        super().__post_init__()
        _check_alpha(self.alpha)

    def check(self, dims: Dims, length: int) -> None:
        rows = self.table_rows(dims)
        if length > rows * rows:
            self.fail(
                "rows",
                rows,
                f"a table whose rows**2 covers the {length} positions asked for "
                f"({rows} rows reach {rows * rows}); use rows >= {int(np.ceil(np.sqrt(length)))}",
            )

    def vectors(self, params: Params, pos: jax.Array) -> jax.Array:
        return hierarchical_embedding(params["table"], pos, self.alpha)


@register
@dataclasses.dataclass(frozen=True)
class Sinusoidal(Scheme):
    """Vaswani's fixed sinusoids (interleaved sin/cos, see `sinusoidal_embedding`), added,
    times a scale.

    base: the wavelength base (10000 in the paper). scale: multiplier of the sinusoids
    (None = 1, the paper; Vaswani et al. ALSO multiply the word embeddings by sqrt(d), so
    there both have unit size). With BERT's init the word embeddings have std 0.02, and
    unit sinusoids drown them after the embedding LayerNorm: the model sees mostly position.
    learned_scale: the scale is a learnable scalar (x-transformers' ScaledSinusoidalEmbedding),
    initialized to `scale`, or hidden**-0.5 when `scale` is None.
    """

    name = "sinusoidal"
    base: float = 10000.0
    scale: Optional[float] = None
    learned_scale: bool = False

    def __post_init__(self):
        if isinstance(self.base, bool) or not isinstance(self.base, (int, float)) or self.base <= 1:
            self.fail("base", self.base, "a number > 1 (10000 in Vaswani et al.)")
        if self.scale is not None and (isinstance(self.scale, bool)
                                       or not isinstance(self.scale, (int, float))
                                       or not 0 < self.scale < float("inf")):
            self.fail("scale", self.scale, "None (1.0, the paper) or a finite number > 0")
        if not isinstance(self.learned_scale, bool):
            self.fail("learned_scale", self.learned_scale, "True or False")

    def check(self, dims: Dims, length: int) -> None:
        del length
        _check_even_width(dims, "sinusoids fill (sin, cos) pairs of dims")

    def init_embed(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        del rng
        if not self.learned_scale:
            return {}
        start = dims.embed_width ** -0.5 if self.scale is None else self.scale
        return {"scale": jnp.asarray(start, jnp.float32)}

    def embed(self, params: Params, x: jax.Array, pos: jax.Array, ids=None) -> jax.Array:
        del ids
        waves = sinusoidal_embedding(pos, x.shape[-1], self.base)
        if self.learned_scale:
            waves = waves * params["scale"]
        elif self.scale is not None:
            waves = waves * jnp.float32(self.scale)
        return x + waves.astype(x.dtype)


@register
@dataclasses.dataclass(frozen=True)
class Multiplicative(Learned):
    """A learned table merged by multiplication: x * (1 + p).

    The `+ 1` is bert4keras' convention (PositionEmbedding merge_mode='mul' returns
    `inputs * (embeddings + 1.0)`): the table holds the DEVIATION from identity, so with
    BERT's small init (std 0.02) the scheme starts as the identity up to ~2% per dim while
    the random rows still break the symmetry between positions. Same range checks and
    NaN fill as `learned`.
    """

    name = "multiplicative"
    rows: Optional[int] = None

    extend_methods: ClassVar[dict] = {}  # the table methods are for added tables only
    default_extension: ClassVar[str] = "as_is"

    def embed(self, params: Params, x: jax.Array, pos: jax.Array, ids=None) -> jax.Array:
        del ids
        return x * (1.0 + self.vectors(params, pos)).astype(x.dtype)

