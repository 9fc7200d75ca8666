"""Tiny randomly initialized Hugging Face models (no downloads) and their torch outputs.

Every architecture is built ONCE per test session from a config, all its parameters
randomized (LayerNorm scales and biases too, so a mis-mapped bias cannot hide behind zeros),
saved with save_pretrained, run in torch on one fixed padded batch, and converted to posjax.
Shapes are the same for every architecture (hidden 32, 4 heads, 2 layers, 64 positions,
batch 2 x 24 tokens, the second row padded) so JAX compiles little.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import numpy as np
import pytest

import torch  # a hard test dependency (requirements-hf.txt): a missing torch fails, never skips

VOCAB = 99
LENGTH = 24
PAD_FROM = 17  # row 1 is padding from here on
ARCHS = ("bert", "roberta", "albert", "roformer", "nezha", "deberta-v2")
VARIANTS = ("deberta-v2-separate",)  # checked for parity only
# Modern encoders, checked for parity only. All layers global (global_attn_every_n_layers=1)
# except '-local' (layer 0 global, layers 1-2 local with an 8-token window, well inside the
# 24-token rows, and their own RoPE theta); '-biased' turns on every bias ModernBERT can have
# (and SwiGLU, and a bias-free decoder).
MODERN = ("modernbert", "modernbert-biased", "modernbert-local", "nomic-bert", "jinabert")
COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0)

torch.set_num_threads(2)


@dataclasses.dataclass
class Case:
    arch: str
    hf_dir: str
    ids: np.ndarray  # HF ids [2, LENGTH]
    mask: np.ndarray
    types: Optional[np.ndarray]  # None when the model has no token types to feed
    hidden: np.ndarray  # torch last hidden states
    logits: np.ndarray  # torch MLM logits over HF ids
    sop: Optional[np.ndarray] = None
    model: Any = None  # posjax.pretrained.Pretrained


def bert_vocab() -> list[str]:
    """A BERT-ordered vocabulary ([PAD] 0, [unused*], [UNK] 7, [CLS] 8, [SEP] 9, [MASK] 10)
    so the converter's reordering to posjax's specials-first order is exercised."""
    words = [f"w{i}" for i in range(VOCAB - 11)]
    return ["[PAD]"] + [f"[unused{i}]" for i in range(6)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words


def randomize(model, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:  # RoFormer's fixed sinusoid table (a frozen weight)
                continue
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name.lower() and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.15 * noise)


def hf_model(arch: str):
    """(torch model, pad id, has token types) for one architecture."""
    import transformers as T

    if arch == "bert":
        return T.BertForMaskedLM(T.BertConfig(**COMMON)), 0, True
    if arch == "roberta":
        cfg = T.RobertaConfig(**dict(COMMON, max_position_embeddings=66), type_vocab_size=1,
                              pad_token_id=1, layer_norm_eps=1e-5)
        return T.RobertaForMaskedLM(cfg), 1, False
    if arch == "albert":
        cfg = T.AlbertConfig(**COMMON, embedding_size=16, hidden_act="gelu_new")
        return T.AlbertForPreTraining(cfg), 0, True
    if arch == "roformer":
        return T.RoFormerForMaskedLM(T.RoFormerConfig(**COMMON, embedding_size=16)), 0, True
    if arch == "deberta-v2":
        cfg = T.DebertaV2Config(**COMMON, relative_attention=True, position_biased_input=False,
                                pos_att_type=["p2c", "c2p"], position_buckets=8,
                                max_relative_positions=32, norm_rel_ebd="layer_norm",
                                share_att_key=True, type_vocab_size=0, layer_norm_eps=1e-7)
        return T.DebertaV2ForMaskedLM(cfg), 0, False
    if arch == "deberta-v2-separate":
        # share_att_key=False (pos_key_proj / pos_query_proj), c2p only, no bucketing, token
        # types, and the non-legacy MLM head (lm_predictions.lm_head.*).
        cfg = T.DebertaV2Config(**COMMON, relative_attention=True, position_biased_input=False,
                                pos_att_type=["c2p"], position_buckets=-1,
                                max_relative_positions=16, norm_rel_ebd="none",
                                share_att_key=False, type_vocab_size=2, layer_norm_eps=1e-7,
                                legacy=False)
        return T.DebertaV2ForMaskedLM(cfg), 0, True
    if arch.startswith("modernbert"):
        extra = dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                     decoder_bias=False, hidden_activation="silu",
                     classifier_activation="gelu_pytorch_tanh") if arch.endswith("biased") else {}
        layers = dict(num_hidden_layers=2, global_attn_every_n_layers=1)
        if arch.endswith("local"):
            layers = dict(num_hidden_layers=3, global_attn_every_n_layers=3, local_attention=8,
                          local_rope_theta=50.0)
        cfg = T.ModernBertConfig(vocab_size=VOCAB, hidden_size=32,
                                 num_attention_heads=4, intermediate_size=37,
                                 max_position_embeddings=64, pad_token_id=0, bos_token_id=8,
                                 eos_token_id=9, cls_token_id=8, sep_token_id=9,
                                 global_rope_theta=500.0, **layers, **extra)
        cfg._attn_implementation = "eager"
        return T.ModernBertForMaskedLM(cfg), 0, False
    if arch == "nomic-bert":  # head_dim 16 != hidden / heads: the separate head width maps
        cfg = T.NomicBertConfig(**COMMON, head_dim=16, rope_parameters={"rope_type": "default",
                                                                        "rope_theta": 1000.0})
        cfg._attn_implementation = "eager"
        return T.NomicBertForMaskedLM(cfg), 0, True
    if arch == "jinabert":  # 6 heads: ALiBi's slopes for a head count that is no power of 2
        from tests.convert.jinabert_reference import JinaBertForMaskedLM

        cfg = {k: v for k, v in COMMON.items() if "dropout" not in k}
        cfg.update(num_attention_heads=6, hidden_size=36, type_vocab_size=2, layer_norm_eps=1e-12,
                   hidden_act="gelu", feed_forward_type="geglu")
        return JinaBertForMaskedLM(cfg), 0, True
    if arch == "nezha":
        from tests.convert.nezha_reference import NezhaForMaskedLM

        cfg = {k: v for k, v in COMMON.items() if "dropout" not in k}
        cfg.update(type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu", max_relative_position=8)
        return NezhaForMaskedLM(cfg), 0, True
    raise ValueError(arch)


def inputs(pad: int, types: bool):
    rng = np.random.default_rng(1)
    ids = rng.integers(11, VOCAB, (2, LENGTH))
    ids[:, 0] = 8  # [CLS]
    mask = np.ones((2, LENGTH), np.int64)
    mask[1, PAD_FROM:] = 0
    ids[1, PAD_FROM:] = pad
    tt = np.zeros((2, LENGTH), np.int64)
    if types:
        tt[:, 10:] = 1
        tt[1, PAD_FROM:] = 0
    return ids, mask, (tt if types else None)


def run_torch(arch: str, model, ids, mask, types):
    t = lambda a: torch.from_numpy(np.asarray(a, np.int64))  # noqa: E731
    with torch.no_grad():
        if arch in ("nezha", "jinabert"):
            hidden, logits = model(t(ids), t(mask), t(types))
            return hidden.numpy(), logits.numpy(), None
        kwargs = dict(input_ids=t(ids), attention_mask=t(mask), output_hidden_states=True)
        if types is not None:
            kwargs["token_type_ids"] = t(types)
        out = model(**kwargs)
        logits = out.prediction_logits if arch == "albert" else out.logits
        if arch.startswith("modernbert"):  # its hidden_states[-1] is before the final norm
            hidden = model.model(input_ids=t(ids), attention_mask=t(mask)).last_hidden_state
            return hidden.numpy(), logits.numpy(), None
        sop = out.sop_logits.numpy() if arch == "albert" else None
        return out.hidden_states[-1].numpy(), logits.numpy(), sop


def build_case(arch: str, root: str) -> Case:
    from posjax import pretrained

    model, pad, types = hf_model(arch)
    randomize(model)
    model.eval()
    hf_dir = os.path.join(root, arch)
    model.save_pretrained(hf_dir)
    if arch == "bert":
        with open(os.path.join(hf_dir, "vocab.txt"), "w") as f:
            f.write("\n".join(bert_vocab()) + "\n")
    ids, mask, tt = inputs(pad, types)
    hidden, logits, sop = run_torch(arch, model, ids, mask, tt)
    return Case(arch, hf_dir, ids, mask, tt, hidden, logits, sop, pretrained.load(hf_dir))


@pytest.fixture(scope="session")
def cases(tmp_path_factory) -> dict:
    """arch -> Case, built lazily (each architecture once per session)."""
    root = str(tmp_path_factory.mktemp("hf"))
    built: dict = {}

    class Lazy(dict):
        def __missing__(self, arch):
            built[arch] = build_case(arch, root)
            self[arch] = built[arch]
            return built[arch]

    return Lazy()


def real(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The rows of a [B, L, ...] array at real (unpadded) tokens."""
    return a[np.asarray(mask) != 0]
