"""posjax.pretrained's implementation (its docstring is the user's guide): load a posjax
workdir or a Hugging Face directory, encode, extend, save. It lives in convert/ because the
converter's command line (`python -m posjax.convert`) is built on it, and convert/ may not
import the layer above it."""

from __future__ import annotations

import copy
import math
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from posjax import memory, positions, schema, storage
from posjax.convert import core
from posjax.convert import store as wd
from posjax.data.tokenizers import read_vocab, tokenizer_class
from posjax.errors import ConfigError
from posjax.models import build_model, validate_model_config
from posjax.models import extension as model_extension
from posjax.positions import scheme_class


def load(path: str) -> "Pretrained":
    """A posjax workdir (config.json + checkpoints/) or a HF model directory (converted in memory)."""
    storage.check_filesystem(path, "path")
    if not storage.isdir(path):
        raise ConfigError("path", path, "an existing posjax workdir or Hugging Face model directory")
    if storage.is_local(path) and core.hf_config_of(path) is not None:  # HF dirs: local only
        c = core.convert_hf(path)
        return Pretrained(c.config, c.params, vocab=c.vocab, metadata=c.metadata())
    config = wd.read_config(path)
    vocab_path = storage.join(path, wd.VOCAB_FILE)
    vocab = None
    if storage.isfile(vocab_path):
        vocab = read_vocab(vocab_path)
    model = Pretrained(config, None, vocab=vocab, metadata=wd.read_metadata(path))
    model._set_params(wd.read_params(path, model._abstract_pure()))
    return model


def mean_pool(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of the hidden states over real tokens (sentence-transformers' mean pooling)."""
    mask = np.asarray(attention_mask, np.float32)[..., None]
    return (hidden * mask).sum(-2) / np.maximum(mask.sum(-2), 1e-9)


class Pretrained:
    """A converted (or trained) MaskedLM with numpy-in / numpy-out helpers."""

    def __init__(self, config, params: Optional[dict], *, vocab: Optional[list] = None,
                 metadata: Optional[dict] = None):
        self.config = config
        validate_model_config(config, require_vocab=True)
        self.metadata = dict(metadata or {})
        self.vocab = vocab
        self.tokenizer = None
        if vocab is not None:
            self.tokenizer = tokenizer_class(schema.view(config).data.tokenizer)(vocab)
        hf_ids = self.metadata.get("hf_ids")
        self.hf_ids = None if hf_ids is None else np.asarray(hf_ids, np.int64)
        with nnx.use_eager_sharding(False):
            abstract = nnx.eval_shape(lambda: build_model(config, nnx.Rngs(0)))
        self._graphdef, self._abstract_state = nnx.split(abstract)
        self._state = None
        self._jit_cache: dict = {}
        self._jax = jax
        if params is not None:
            self._set_params(params)

    # -- parameters ---------------------------------------------------------------------------
    def _abstract_pure(self) -> dict:
        return nnx.to_pure_dict(self._abstract_state)

    def _set_params(self, params: dict) -> None:
        state = copy.deepcopy(self._abstract_state)
        nnx.replace_by_pure_dict(state, self._jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params))
        self._state = state
        self._params = params

    @property
    def params(self) -> dict:
        """Pure dict of the parameters (numpy or jax arrays)."""
        return self._params

    def module(self):
        """The Flax NNX model holding these weights, for a training loop of your own: built
        from the abstract model and the loaded arrays, with no random initialization (which
        would cost a second set of weights and a compile per initializer)."""
        if self._state is None:
            raise ValueError("this Pretrained has no parameters: pass params, or use load()")
        return nnx.merge(self._graphdef, self._state)

    # -- inputs ------------------------------------------------------------------------------
    @property
    def max_length(self) -> int:
        return int(self.config.model.max_length)

    def hf_to_posjax(self, ids) -> np.ndarray:
        """Token ids of the original HF tokenizer -> posjax ids (identity when not reordered)."""
        ids = np.asarray(ids)
        if self.hf_ids is None:
            return ids.astype(np.int32)
        inverse = np.empty_like(self.hf_ids)
        inverse[self.hf_ids] = np.arange(self.hf_ids.size)
        return inverse[ids].astype(np.int32)

    def tokenize(self, texts: Sequence[str], max_length: Optional[int] = None):
        """[CLS] text [SEP] ids, right-padded with [PAD]: (input_ids, attention_mask) int32."""
        if self.tokenizer is None:
            raise ConfigError("tokenizer", None, "a model converted with a vocab.txt (this one has "
                              "none: pass token ids to encode())")
        tok = self.tokenizer
        if getattr(tok, "name", None) == "patch_codes":
            raise ConfigError("tokenizer", tok.name, "a text tokenizer: this model reads image "
                              "patch codes (posjax.data.patches); pass their ids to encode()")
        limit = self.max_length if max_length is None else int(max_length)
        rows = [[tok.cls_id] + tok.encode(t)[: limit - 2] + [tok.sep_id] for t in texts]
        length = max(len(r) for r in rows)
        ids = np.full((len(rows), length), tok.pad_id, np.int32)
        mask = np.zeros((len(rows), length), np.int32)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        return ids, mask

    @property
    def position_dims(self) -> int:
        """1, 2 for a scheme that reads (row, column) positions (rope2d), 3 for (t, h, w)
        (mrope)."""
        return scheme_class(self.config.position.name).position_dims

    def positions(self, length: int, grid: Optional[Sequence[int]] = None) -> np.ndarray:
        """The positions of one row of `length` tokens: [L] 0 .. L-1 for a 1-D scheme; for a
        2-D scheme [L, 2] (row, column) of a rows x columns grid in raster order, the way
        posjax.data.patches numbers image patches in training; for a 3-D scheme [L, 3] with
        the frame t = 0 in front (one image)."""
        if self.position_dims == 1:
            if grid is not None:
                raise ConfigError("grid", grid, f"None for the 1-D position "
                                  f"'{self.config.position.name}' (it reads 0 .. L-1)")
            return np.arange(length, dtype=np.int32)
        if grid is None:
            side = math.isqrt(length)
            if side * side != length:
                raise ConfigError("input_ids", f"length {length}", f"a square grid * grid of "
                                  f"patches (e.g. 64 for 8 x 8) for the 2-D position "
                                  f"'{self.config.position.name}', or pass grid=(rows, columns)")
            grid = (side, side)
        ok = (isinstance(grid, (tuple, list)) and len(grid) == 2
              and all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1
                      for n in grid))
        if not ok or int(grid[0]) * int(grid[1]) != length:
            raise ConfigError("grid", grid, f"(rows, columns), two positive ints whose product "
                              f"is the length {length}")
        idx = np.arange(length, dtype=np.int32)
        coords = [idx // int(grid[1]), idx % int(grid[1])]
        return np.stack([0 * idx] * (self.position_dims - 2) + coords, axis=-1)

    def batch(self, input_ids, attention_mask=None, token_type_ids=None, *,
              grid: Optional[Sequence[int]] = None) -> dict:
        """Checked batch-contract dict (positions as the original model numbers them; `grid`:
        (rows, columns) of a 2-D scheme's patches, default square)."""
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ConfigError("input_ids", f"{ids.dtype} array of shape {ids.shape}",
                              "an integer array [batch, length]")
        b, length = ids.shape
        m = self.config.model
        vocab = int(m.vocab_size)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise ConfigError("input_ids", f"values in [{ids.min()}, {ids.max()}]",
                              f"ids in [0, {vocab}) (posjax ids; map HF ids with hf_to_posjax)")
        if length > self.max_length:
            raise ConfigError("input_ids", f"length {length}",
                              f"<= model.max_length={self.max_length}; call .extend({length}) first")
        mask = np.ones((b, length), np.int32) if attention_mask is None else np.asarray(attention_mask)
        if mask.shape != ids.shape:
            raise ConfigError("attention_mask", f"shape {mask.shape}", f"the shape of input_ids {ids.shape}")
        mask = (mask != 0).astype(np.int32)
        types = np.zeros((b, length), np.int32) if token_type_ids is None else np.asarray(token_type_ids)
        if types.shape != ids.shape:
            raise ConfigError("token_type_ids", f"shape {types.shape}", f"the shape of input_ids {ids.shape}")
        n_types = int(m.type_vocab_size)
        if types.size and (types.min() < 0 or types.max() >= max(n_types, 1)):
            raise ConfigError("token_type_ids", f"values in [{types.min()}, {types.max()}]",
                              f"ids in [0, {max(n_types, 1)}) (this model has {n_types} token types)")
        if self.metadata.get("position_ids") == "roberta":
            # HF RoBERTa: real tokens count 0, 1, 2, ... (after dropping the padding_idx+1 rows).
            positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0) * mask
        else:
            row = self.positions(length, grid)
            positions = np.broadcast_to(row, (b,) + row.shape)
        out = {"input_ids": ids.astype(np.int32), "positions": positions.astype(np.int32),
               "segment_ids": mask}
        if n_types > 0:
            out["token_type_ids"] = types.astype(np.int32)
        return out

    # -- forward -----------------------------------------------------------------------------
    def _fn(self, kind: str, dense_rows: bool = False):
        """The jitted forward; dense_rows: every row is one unpadded example, so attention
        builds and applies no mask (the encoder's static promise, checked by the caller)."""
        if (kind, dense_rows) not in self._jit_cache:
            graphdef = self._graphdef

            def forward(state, batch):
                model = nnx.merge(graphdef, state)
                if kind == "hidden":
                    return model.encoder(batch, deterministic=True,
                                         dense_rows=dense_rows).astype("float32")
                return model(batch, deterministic=True, dense_rows=dense_rows)["mlm_logits"]

            self._jit_cache[kind, dense_rows] = self._jax.jit(forward)
        return self._jit_cache[kind, dense_rows]

    @staticmethod
    def _dense(batch: dict) -> bool:
        # An all-ones mask: no padding and one example per row, known here on the host.
        return bool(np.all(batch["segment_ids"] == 1))

    def encode(self, input_ids, attention_mask=None, token_type_ids=None, *,
               grid: Optional[Sequence[int]] = None) -> np.ndarray:
        """Last hidden states [B, L, hidden], float32 numpy. Padded positions are zeros-attending
        rows (compare real tokens only). `grid`: see batch()."""
        batch = self.batch(input_ids, attention_mask, token_type_ids, grid=grid)
        self._check_memory(batch["input_ids"].shape)
        return np.asarray(self._fn("hidden", self._dense(batch))(self._state, batch))

    def mlm_logits(self, input_ids, attention_mask=None, token_type_ids=None, *,
                   grid: Optional[Sequence[int]] = None) -> np.ndarray:
        """MLM logits [B, L, vocab] over posjax ids, float32 numpy. `grid`: see batch()."""
        batch = self.batch(input_ids, attention_mask, token_type_ids, grid=grid)
        self._check_memory(batch["input_ids"].shape, output_width=int(self.config.model.vocab_size))
        return np.asarray(self._fn("mlm", self._dense(batch))(self._state, batch))

    def _params_bytes(self, params=None) -> int:
        params = self._params if params is None else params
        return 4 * sum(int(np.size(x)) for x in self._jax.tree.leaves(params))

    def _check_memory(self, shape, output_width=None) -> None:
        """ConfigError before the forward pass allocates, when the batch cannot fit in memory."""
        b, length = shape
        params = self._params_bytes()

        def need(rows, n):
            return memory.estimate_bytes(self.config.model, batch=rows, length=n,
                                         params_bytes=params, output_width=output_width)

        # One row too long names the length; otherwise too many rows name the batch size.
        memory.check_fits("input_ids length", length, lambda n: need(1, n))
        memory.check_fits(f"input_ids rows (of length {length})", b, lambda r: need(r, length))

    # -- length extension ----------------------------------------------------------------------
    def extend(self, max_length: int, method: Optional[str] = None, alpha: float = 0.4) -> "Pretrained":
        """The same weights serving `max_length` positions (see the module docstring)."""
        config, rewrite = _extended(self.config, max_length, method, alpha)
        params = self._params if rewrite is None else rewrite(self._params)
        # One row of max_length tokens must fit, or the extended model is unusable: refuse now,
        # not when encode() runs out of memory.
        size = self._params_bytes(params)
        memory.check_fits("max_length", max_length, lambda n: memory.estimate_bytes(
            config.model, batch=1, length=n, params_bytes=size))
        return Pretrained(config, params, vocab=self.vocab, metadata=self.metadata)

    def save(self, out: str) -> str:
        """Write a posjax workdir (config.json, vocab.txt, convert.json, step-0 checkpoint)."""
        return wd.write(out, self.config, self._params, vocab=self.vocab, metadata=self.metadata)


def extended_config(config, max_length: int, method: Optional[str] = None, alpha: float = 0.4):
    """A copy of `config` whose model serves `max_length` positions with the same params
    (Pretrained.extend also takes the methods that rewrite a table)."""
    config, rewrite = _extended(config, max_length, method, alpha)
    if rewrite is not None:
        raise ConfigError("method", method, "a method that keeps the params (this one rewrites "
                          "the position table: use Pretrained.extend)")
    return config


def _extended(config, max_length: int, method: Optional[str], alpha: float):
    """(the longer model's config, params -> its params or None when they stay): the scheme's
    own extension at `max_length`, the original max_length counting as the trained length."""
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ConfigError("max_length", max_length, "a positive int")
    config = ml_collections.ConfigDict(config.to_dict())
    scheme = model_extension.bound_scheme(config)
    given = method or scheme.default_extension
    method = positions.ALIASES.get(given, given)
    if method not in scheme.offered_methods():
        offered = [m for m in scheme.offered_methods() if m != positions.AS_IS] + ["none"]
        raise ConfigError("method", given, f"{positions.suggest(given, offered)} for position "
                          f"'{scheme.name}'")
    scheme.check_original()
    m = config.model
    original = int(m.max_length)
    settings = positions.ExtendSettings(alpha=alpha, factor=max(float(max_length) / original, 1.0))
    try:
        extension = scheme.extend(method, max_length, None, settings)
    except positions.NotApplicable as e:
        raise ConfigError("max_length", max_length, e.allowed or str(e)) from None
    model_extension.apply(config, extension)  # RoPE scalings: the global layers only, as eval.py
    m.max_length = max(int(max_length), original)
    m.attention = "auto"  # chunked past 1024 keys on CPU, the kernel on accelerators
    if extension.embed_rewrite is None:
        return config, None
    return config, lambda params: model_extension.rewrite_params(params, extension)
