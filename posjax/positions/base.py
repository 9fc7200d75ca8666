"""The scheme contract: a position scheme is a frozen dataclass that fills some of the hooks
in HOOKS (eighteen: on embeddings, layer inputs, queries/keys, logits, values and per-token
state), plus optional decoder methods, and registers itself with `@register` (registry.py).

A scheme object holds only static configuration (hashable, so it can be a jit static
argument). `make(config)` builds it from the config fields; the model then calls
`scheme.bind(dims)` once, which checks the scheme against the model's `Dims` and returns a
copy that carries them (`scheme.dims`). Hooks and `init_*` read the dims from there, so
constants that follow from the dims (ALiBi slopes, NEZHA's table depth) are computed, never
stored as parameters. The bound fields (`dims`, see `BOUND_FIELDS`) cannot be set from a config.

What differs between schemes is said once, at the class: `name`, `causal_only` (why, when
the scheme serves causal models only), `position_dims`, `share_layers`, the hooks it defines
(methods named as in HOOKS), and the length-extension methods it offers (`extend_methods`,
built by `extend`; see extension.py). Everything else in posjax asks the class.

Learnable parameters are separate pytrees made by `init_embed` / `init_layer` and passed back
into every hook. Positions are always explicit int32 arrays `[batch, length]`, never implied
by shapes, so packing, offsets and randomized positions all work the same way. A scheme with
`position_dims = 2` (rope2d: image patches) takes `[batch, length, 2]` (row, column) instead;
attention checks that every position array has the shape its scheme declares.

Array layouts (B batch, L length, H heads, D head dim, E model width):
  x          [B, L, E]   token embeddings (embed hook)
  q, k, v    [B, L, H, D]
  q_pos      [B, Lq] int32, k_pos [B, Lk] int32   ([B, L, 2] when position_dims = 2)
  logits     [B, H, Lq, Lk] float32

Hooks (a hook a scheme does not use stays None; attention checks `scheme.bias is not None`;
HOOKS below has one line each, for listings):
  embed(params, x, pos, ids) -> x
      acts on token embeddings once, before layer 0. `params` from `init_embed`; `ids` are the
      token ids [B, L] (complex order gives every word its own frequency and phase).
  rotate(params, q, k, q_pos, k_pos) -> (q, k)
      acts on queries and keys in every layer (RoPE family). Elementwise in positions, so
      it is applied to whole arrays (O(L) memory) or to tiles, with the same result.
  bias(params, q_pos, k_pos) -> [B, H, Lq, Lk] float32
      added to the SCALED logits. Must be a function of position tiles only: attention calls
      it once per (query block, key block) with the positions of that tile.
  content_logits(params, q, k, q_pos, k_pos) -> [B, H, Lq, Lk] float32
      extra RAW logit terms (added to q.k before the 1/sqrt(D) scale), e.g. NEZHA's q.r_ij.
  content_factors(params, q, k, q_pos, k_pos) -> (q', q_extra [B, Lq, H, F],
                                                   k_extra [B, Lk, H or 1, F])
      the raw logits in factored form, REPLACING q.k: raw_ij = q'_i.k_j + q_extra_i.k_extra_j,
      with q' [B, Lq, H, D] the queries of the content product (q itself, or q shifted by a
      per-head vector: XL's u) and a position term that factors exactly into per-query and
      per-key features (XL's (q_i + v).W_r R_{i-j}, by the angle-difference identity); k_extra
      with 1 head is shared by all heads. Row i of q' and q_extra may depend only on query i
      and its position, row j of k_extra only on key j and its position: attention calls it
      on tiles, or once on whole arrays, where the compiled CPU kernel runs the term as plain
      attention of [q' | q_extra] over [k | k_extra] (key dim D + F). Not with `scores`.
  content_values(params, probs, q_pos, k_pos) -> [B, Lq, H, D]
      extra output term sum_j probs_ij * r_ij. `probs` may be unnormalized (online softmax);
      the hook must be linear in `probs`.
  scores(params, q, k, q_pos, k_pos) -> [B, H, Lq, Lk] float32
      REPLACES the raw q.k dot product (ReRoPE computes several rotated products and picks
      one per relative distance). q and k arrive unrotated when `scores` is set.
  rotate_values(params, x, pos, k_pos, inverse) -> x
      the value path (RoPE with on_values=True): every path rotates v [B, Lk, H, D] by the key
      positions (pos = k_pos, inverse=False) before attention and the output [B, Lq, H, D] back
      by the query positions (pos = q_pos, inverse=True) after it, so that
      out_i = sum_j p_ij R(j - i) v_j. Elementwise in positions (O(L), whole arrays); k_pos is
      passed for frequencies that depend on the key positions (dynamic NTK).

Per-token state (FoX's forget-gate sums): attention calls `prepare` once per forward on the
whole arrays, then hands every tile its rows of the result:
  prepare(params, q, k, v, q_pos, k_pos) -> (q_tok [B, Lq, ...], k_tok [B, Lk, ...])
  token_bias(params, q_tok, k_tok, q_pos, k_pos) -> [B, H, Lq, Lk] float32
      added to the scaled logits like `bias`, from the tile's rows of the prepared arrays.

Contextual counts (CoPE; computed by posjax/attention/counts.py, which carries them across
key blocks in the chunked path):
  count_gates(params, logits) -> gates [B, H, Lq, Lk] in [0, 1], of the scaled logits
  count_logits(params, q, counts, q_pos, k_pos) -> [B, H, Lq, Lk] float32
      added to the scaled logits, at the gated key counts `counts` (float, >= 0).

A multiplier of each query's logits from how many keys it may attend (attention counts them
after every mask, on each path: the log-n pass; SSMax):
  length_scale(params, n_keys) -> [B, H, Lq] float32
      multiplies the scaled logits (after bias, token_bias, map_logits and count_logits,
      with log-n when model.logn_length is set), from n_keys [B, 1, Lq] int32, the keys each
      query may attend.

A map of a tile's logits, all heads at once (DAPE's MLP over every head's [logit, bias]):
  map_logits(params, logits, q_pos, k_pos) -> [B, H, Lq, Lk] float32
      takes the tile's scaled logits [B, H, Lq, Lk] float32 (raw * logit_scale + bias +
      token_bias) and returns the tile's new logits, the same shape; log-n, length_scale,
      count_logits and every mask come after it. Entry [b, :, i, j] of the result may read
      every head of entry [b, :, i, j] of `logits` and the positions q_pos[b, i], k_pos[b, j],
      nothing else: attention calls it per (query block, key block) tile, and masked pairs
      (padding, other segments, future keys) are computed and then discarded by the masks,
      so a masked key reaches no other pair and stays masked whatever finite value the hook
      returns (far below 1e30 in size: the lean path masks by adding -1e30).

A replacement of softmax, the map of a query's logits to its attention weights (stick-breaking
attention); attention calls it on each SIDE of the query, outward from it:
  normalize(params, logits, mask, carry, q_pos, k_pos, sides) -> (weights, carry)
      takes a tile's final scaled logits [B, H, Lq, Lk] float32 (after every logit hook,
      log-n and length_scale; not masked) with the keys NEAREST FIRST for every query on this
      side, mask [B, 1 or H, Lq, Lk] bool (the pairs of this side that may attend), and carry
      [B, H, Lq] float32, the query's state from the nearer key tiles of this side (zeros at
      the nearest tile); returns weights [B, H, Lq, Lk] float32 in the same key order (0
      where masked), which attention multiplies into v as they are (no further
      normalization), and the carry after this tile. Sides: the keys before the query
      (k_pos <= q_pos), and for bidirectional attention also the keys after it (k_pos >=
      q_pos); the query's own position is on both; `sides` (1 or 2) says how many. Attention
      adds the sides' weights. A side's keys are its tiles in array order (reversed for the
      side before), so the stick is broken in array order: the order of positions within an
      example (packed examples, padding and other segments are masked). The chunked path
      visits a side's key blocks from the query's block outward (lax.scan, reversed for the
      side before); the reference calls it once per side on whole rows. Sinks, which join a
      softmax's denominator, are refused with it.

Scores carried outward from the query, for logits that depend on the tokens between the query
and the key (PaTH: the product of per-token transforms between them); they replace q.k:
  carried_scores(params, carry, k, q_tok, k_tok, mask, q_pos, k_pos, before) -> (raw, carry)
      raw [B, H, Lq, Lk] float32 replaces the tile's raw q.k (the scale, bias, token_bias,
      map_logits, log-n, length_scale, masks and softmax follow as usual). carry
      [B, Lq, H, D] float32 is each query's state from the key tiles of this side nearer to
      it (attention starts it at q itself); k [B, Lk, H, D] the tile's keys in ARRAY order,
      q_tok / k_tok the tile's rows of `prepare`'s arrays, mask [B, 1, Lq, Lk] bool the pairs
      of this side that may attend, before: True for the side of the keys at or before the
      query (k_pos <= q_pos), False for the keys after it (k_pos > q_pos, bidirectional
      only): each key is on exactly one side. Returns the raw scores and the carry after
      this tile. The reference and rows paths call it once per side on whole key rows;
      chunked per (query block, key block) tile, walking each side's key blocks outward from
      the query (a reversed scan for the side before), with the online softmax carried across
      both sides; a tile with no pair on the side is skipped and must leave the carry as it
      is. Lean runs the reference for it and the kernel refuses it.
  carried_keys(params, k, k_tok) -> k_tok [B, Lk, ...]
      optional companion of carried_scores (only with it): the work on a key tile that
      depends on its keys alone (PaTH's per-chunk UT transform), done once per key tile
      instead of once per (query block, key tile). k [B, Lk, H, D] the tile's keys, k_tok its
      rows of `prepare`'s arrays; the result replaces them as the k_tok that carried_scores
      receives for exactly this tile. The reference calls it once on the whole key rows, rows
      once on the whole rows (a local layer: on each query block's band, its tile), chunked
      once on each key block before the loop over query blocks.

A model hook outside attention (the Transformer layer calls it, attention never sees it):
  layer_input(params, x, pos) -> x
      acts on each layer's input x [B, L, hidden] before attention, with that layer's params
      (convolutional position with placement='layers').

Every tile-wise hook (bias, content_logits, content_factors, content_values, scores, map_logits)
is called by
the chunked and kernel paths on tiles, so none may assume it sees the whole sequence.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping, Optional

import jax

from posjax.errors import ConfigError
from posjax.positions import hooks
from posjax.positions.extension import (AS_IS, AS_IS_DOC, Extension, ExtendSettings,
                                        NotApplicable)

Params = Any  # a pytree of arrays (usually a dict); {} for schemes without parameters


# Every hook with what it acts on (the order of `hooks` in logs and messages).
HOOKS = {
    "embed": "token embeddings, once before layer 0",
    "rotate": "queries and keys, per layer",
    "bias": "added to the scaled logits, from the tile's positions",
    "content_logits": "extra raw logit terms of a tile (before the 1/sqrt(D) scale)",
    "content_factors": "replaces a tile's raw q.k by q'.k + q_extra.k_extra, from per-token factors",
    "content_values": "extra output terms, linear in the tile's probabilities",
    "scores": "replaces the raw q.k product of a tile",
    "rotate_values": "values before attention and the output after it",
    "layer_input": "each layer's input, before attention (outside attention)",
    "prepare": "per-token state, once per forward on the whole arrays",
    "token_bias": "added to the scaled logits, from the tile's rows of the prepared state",
    "count_gates": "gates of the scaled logits, summed into key counts",
    "count_logits": "added to the scaled logits, at the gated key counts",
    "length_scale": "multiplies each query's scaled logits, from its number of attended keys",
    "map_logits": "maps a tile's scaled logits to new ones, all heads of each pair at once",
    "normalize": "replaces softmax: a tile's logits to weights, outward from the query",
    "carried_scores": "replaces a tile's raw q.k, with a per-query state carried outward",
    "carried_keys": "a key tile's k_tok for carried_scores, once per key tile",
}

# Hooks that act outside attention (on embeddings or layer inputs); the rest are attention's.
MODEL_HOOKS = ("embed", "layer_input")

# Scheme fields set by `bind`, never by a config (`registry.make` refuses them).
BOUND_FIELDS = ("dims",)


@dataclasses.dataclass(frozen=True)
class Dims:
    """Model dimensions a scheme needs to build its parameters and check its inputs."""

    num_heads: int
    head_dim: int
    hidden: int  # model width
    max_length: int  # largest position + 1 the model must support (table rows, etc.)
    causal: bool = False  # True for the causal-LM stack, False for bidirectional encoders
    vocab_size: int = 0  # token vocabulary, for schemes with per-word parameters
    # Width of the token embeddings the embed hook acts on: ALBERT adds positions in its
    # factorized embedding width before projecting to `hidden`. 0 = hidden (no factorization).
    embedding_dim: int = 0

    @property
    def embed_width(self) -> int:
        """Width E of the token embeddings the embed hook acts on."""
        return self.embedding_dim or self.hidden

    @property
    def embed_field(self) -> str:
        """The config field that sets `embed_width`, for error messages."""
        return "model.embedding_dim" if self.embedding_dim else "model.hidden"


@dataclasses.dataclass(frozen=True)
class Scheme:
    """Base class. Subclasses are frozen dataclasses whose fields are the config options."""

    name: ClassVar[str] = "base"

    # Whether all layers use one set of layer params (e.g. T5's shared bias, TUPE).
    # Subclasses that allow a choice declare it as a dataclass field with the same name.
    share_layers: ClassVar[bool] = False

    # Coordinates per position: 1 (a token index, [B, L]) or 2 ((row, column) of an image
    # patch, [B, L, 2]). Masks that compare positions (causal, sliding windows) need 1.
    position_dims: ClassVar[int] = 1

    # Non-empty for a scheme that serves causal models only: why (`check` refuses a
    # bidirectional model with this reason, naming model.causal).
    causal_only: ClassVar[str] = ""

    # Length extension (extension.py): the methods `extend` builds besides 'as_is', each with
    # one line; the one Pretrained.extend uses by default; why another scheme cannot take one
    # of them ({method}, {scheme} filled in by evaluation.methods.why_not); and whether
    # positions past the trained ones have no encoding at all (a table), so that evaluation
    # compares the methods against cutting the context to the trained length ('truncate')
    # by default.
    extend_methods: ClassVar[Mapping[str, str]] = {}
    default_extension: ClassVar[str] = AS_IS
    extend_refusal: ClassVar[str] = "position '{scheme}' has no extension '{method}'"
    bounded: ClassVar[bool] = False
    # Leaves of init_layer's tree that take BERT's excluded treatment in LAMB (no weight
    # decay, no trust ratio; posjax.training.optimizer): every leaf initialised at zero, which
    # a trust ratio holds there (ratio 1 on the first step, then ||w|| / ||update||, about
    # the learning rate), LayerNorm parameters, and biases the default patterns miss (leaves
    # not named 'bias': an MLP's b1, a gate's b), as BERT excludes every bias.
    no_decay: ClassVar[tuple[str, ...]] = ()

    # Set by `bind` (keyword-only, so subclasses add positional config fields freely).
    dims: Optional[Dims] = dataclasses.field(default=None, kw_only=True)

    # Hooks. A subclass overrides the ones it uses with methods, of the signatures in hooks.py.
    embed: ClassVar[Optional[hooks.Embed]] = None
    rotate: ClassVar[Optional[hooks.Rotate]] = None
    bias: ClassVar[Optional[hooks.Bias]] = None
    content_logits: ClassVar[Optional[hooks.ContentLogits]] = None
    content_factors: ClassVar[Optional[hooks.ContentFactors]] = None
    content_values: ClassVar[Optional[hooks.ContentValues]] = None
    scores: ClassVar[Optional[hooks.Scores]] = None
    rotate_values: ClassVar[Optional[hooks.RotateValues]] = None
    layer_input: ClassVar[Optional[hooks.LayerInput]] = None
    prepare: ClassVar[Optional[hooks.Prepare]] = None
    token_bias: ClassVar[Optional[hooks.TokenBias]] = None
    count_gates: ClassVar[Optional[hooks.CountGates]] = None
    count_logits: ClassVar[Optional[hooks.CountLogits]] = None
    length_scale: ClassVar[Optional[hooks.LengthScale]] = None
    map_logits: ClassVar[Optional[hooks.MapLogits]] = None
    normalize: ClassVar[Optional[hooks.Normalize]] = None
    carried_scores: ClassVar[Optional[hooks.CarriedScores]] = None
    carried_keys: ClassVar[Optional[hooks.CarriedKeys]] = None

    def bind(self, dims: Dims) -> "Scheme":
        """This scheme checked against `dims` (ConfigError if it cannot serve them at
        dims.max_length positions) and carrying them. Binding to the dims it already carries
        returns it unchanged; to other dims is a programming error."""
        if self.dims is not None:
            if self.dims != dims:
                raise ValueError(f"scheme '{self.name}' is bound to {self.dims}, not {dims}")
            return self
        self.check(dims, dims.max_length)
        return dataclasses.replace(self, dims=dims, **self.bound_values(dims))

    def bound_values(self, dims: Dims) -> dict:
        """Config fields whose None default follows the model (e.g. T5's `bidirectional`
        from `dims.causal`), resolved at bind time."""
        del dims
        return {}

    @property
    def bound_dims(self) -> Dims:
        """The dims of a bound scheme; ValueError for an unbound one (hooks need them)."""
        if self.dims is None:
            raise ValueError(f"scheme '{self.name}' is not bound: call scheme.bind(dims) first "
                             "(models do it once when they are built)")
        return self.dims

    def init_embed(self, rng: jax.Array) -> Params:
        """Parameters of the embed hook (made once per model; the scheme must be bound)."""
        del rng
        return {}

    def init_layer(self, rng: jax.Array) -> Params:
        """Parameters of the attention hooks (made per layer, or once if share_layers; the
        scheme must be bound)."""
        del rng
        return {}

    # -- enhanced mask decoder (DeBERTa's EMD; a model hook outside attention) ---------------
    def decoder_passes(self) -> int:
        """Passes of an enhanced mask decoder: the encoder's last layer is run again this many
        times on the input of that layer (keys and values), with queries that start as that
        input + `decoder_query`; the last pass feeds the heads. 0 = no decoder."""
        return 0

    def init_decoder(self, rng: jax.Array) -> Params:
        """Parameters of `decoder_query` (made once per model; the scheme must be bound)."""
        del rng
        return {}

    def decoder_query(self, params: Params, h: jax.Array, pos: jax.Array) -> jax.Array:
        """The decoder's first queries from the last layer's input h [B, L, hidden]."""
        raise NotImplementedError(f"scheme '{self.name}' has no enhanced mask decoder")

    def check(self, dims: Dims, length: int) -> None:
        """Raise ConfigError if this scheme cannot serve `dims` at `length` positions.

        Called by `bind` (length = dims.max_length) and by config validation before anything
        is built; `length` is the largest position + 1. Here: a `causal_only` scheme refuses a
        bidirectional model; a subclass that adds checks calls super().check(dims, length).
        """
        del length
        if self.causal_only and not dims.causal:
            raise ConfigError("model.causal", dims.causal,
                              f"True for position '{self.name}': {self.causal_only}")

    def logit_scale(self, head_dim: int) -> float:
        """Multiplier of the raw logits (q.k + content_logits). Default 1/sqrt(D).

        DeBERTa uses 1/sqrt(3D); YaRN multiplies in its attention temperature.
        """
        return 1.0 / math.sqrt(head_dim)

    # -- length extension (extension.py) ---------------------------------------------------
    def extend(self, method: str, length: int, trained_length: Optional[int] = None,
               settings: ExtendSettings = ExtendSettings()) -> Extension:
        """This (bound) scheme run at `length` positions by `method`: 'as_is' or one of
        `extend_methods`. `trained_length` is the length the model was trained at (None: the
        whole trained extent, dims.max_length). NotApplicable when the method cannot reach
        `length`. Subclasses with methods build theirs and pass the rest here."""
        del length, trained_length, settings
        if method != AS_IS:
            raise NotApplicable(f"position '{self.name}' has no extension '{method}'")
        return Extension(self.kept_fields())

    def kept_fields(self) -> dict:
        """Position fields a longer model must pin to keep this scheme's trained parameters
        (a table sized by model.max_length pins its rows); {} by default."""
        return {}

    def check_original(self) -> None:
        """ConfigError if this scheme is itself an extension (Pretrained.extend extends the
        original model only)."""

    @classmethod
    def offered_methods(cls) -> dict:
        """Every length-extension method of this scheme, 'as_is' first, with one line each."""
        return {AS_IS: AS_IS_DOC, **cls.extend_methods}

    # -- helpers for subclasses --------------------------------------------------------
    def fail(self, field: str, value, allowed: str) -> None:
        """Raise ConfigError with the field name prefixed by `position.`."""
        raise ConfigError(f"position.{field}", value, allowed)

    @classmethod
    def hook_names(cls) -> tuple[str, ...]:
        """The hooks this class defines (in HOOKS order); an instance may leave some unused
        (`hooks`)."""
        return tuple(n for n in HOOKS if getattr(cls, n) is not None)

    @property
    def hooks(self) -> tuple[str, ...]:
        """Names of the hooks this scheme fills, for logs and dispatch."""
        return self.hook_names()

    @property
    def attention_hooks(self) -> tuple[str, ...]:
        """The hooks attention computes (all but MODEL_HOOKS)."""
        return tuple(n for n in self.hooks if n not in MODEL_HOOKS)
