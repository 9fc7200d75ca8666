"""A torch JinaBERT (symmetric-ALiBi BERT with a gated MLP) for parity tests.

transformers has no JinaBERT: the checkpoints (jinaai/jina-bert-*, jina-embeddings-v2-*) are
BERT configs (model_type 'bert', position_embedding_type 'alibi', feed_forward_type 'geglu' or
'reglu') with remote code, jinaai/jina-bert-implementation modeling_bert.py. This module
re-implements its JinaBertForMaskedLM with the SAME state-dict names:
  embeddings   word + token type (no position table under 'alibi') -> LayerNorm
  attention    BERT's query/key/value/output.dense + LayerNorm (post-LN), scores
               q.k / sqrt(D) + padding mask, then softmax(scores + alibi) with
               alibi[h, i, j] = -slope_h * |i - j| (slopes: ALiBi's get_slopes, 2**(-8/H)...)
  mlp          JinaBertGLUMLP: gated_layers [2F, E] without bias; act(first F) * (second F)
               (GELU for geglu, ReLU for reglu); wo with bias; layernorm(wo(.) + x)
  head         BERT's cls.predictions (dense, gelu, LayerNorm, tied decoder + bias)
"""

from __future__ import annotations

import json
import math
import os

import torch
from torch import nn


def head_slopes(n: int) -> list:
    def power_of_2(m):
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start**i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_2(c) + head_slopes(2 * c)[0::2][: n - c]


def alibi(heads: int, width: int) -> torch.Tensor:
    pos = torch.arange(width)
    distance = torch.abs(pos[None, :] - pos[:, None])[None].expand(heads, -1, -1)
    slopes = torch.tensor(head_slopes(heads)) * -1
    return (slopes[:, None, None] * distance)[None]  # [1, H, L, L]


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

    def forward(self, x, mask_add, bias):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.heads, self.d).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d) + mask_add
        probs = torch.softmax(scores + bias, dim=-1)
        return (probs @ v).transpose(1, 2).reshape(b, n, -1)


class GLUMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, f = c["hidden_size"], c["intermediate_size"]
        self.f = f
        self.gated_layers = nn.Linear(h, 2 * f, bias=False)
        self.act = nn.ReLU() if c["feed_forward_type"] == "reglu" else nn.GELU()
        self.wo = nn.Linear(f, h)
        self.layernorm = nn.LayerNorm(h, eps=c["layer_norm_eps"])

    def forward(self, x):
        h = self.gated_layers(x)
        return self.layernorm(self.wo(self.act(h[..., : self.f]) * h[..., self.f :]) + x)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.attention = nn.Module()
        self.attention.self = SelfAttention(h, c["num_attention_heads"])
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(h, h)
        self.attention.output.LayerNorm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.mlp = GLUMLP(c)

    def forward(self, x, mask_add, bias):
        a = self.attention.output
        x = a.LayerNorm(x + a.dense(self.attention.self(x, mask_add, bias)))
        return self.mlp(x)


class JinaBertForMaskedLM(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.c = c
        h, eps = c["hidden_size"], c["layer_norm_eps"]
        self.bert = nn.Module()
        e = self.bert.embeddings = nn.Module()
        e.word_embeddings = nn.Embedding(c["vocab_size"], h)
        e.token_type_embeddings = nn.Embedding(c["type_vocab_size"], h)
        e.LayerNorm = nn.LayerNorm(h, eps=eps)
        self.bert.encoder = nn.Module()
        self.bert.encoder.layer = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        p = nn.Module()
        p.transform = nn.Module()
        p.transform.dense = nn.Linear(h, h)
        p.transform.LayerNorm = nn.LayerNorm(h, eps=eps)
        p.bias = nn.Parameter(torch.zeros(c["vocab_size"]))
        self.cls = nn.Module()
        self.cls.predictions = p

    def forward(self, input_ids, attention_mask, token_type_ids):
        e = self.bert.embeddings
        x = e.LayerNorm(e.word_embeddings(input_ids) + e.token_type_embeddings(token_type_ids))
        mask_add = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        bias = alibi(self.c["num_attention_heads"], input_ids.shape[1])
        for layer in self.bert.encoder.layer:
            x = layer(x, mask_add, bias)
        p = self.cls.predictions
        t = p.transform.LayerNorm(nn.functional.gelu(p.transform.dense(x)))
        return x, t @ e.word_embeddings.weight.T + p.bias

    def save_pretrained(self, path: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()},
                  os.path.join(path, "model.safetensors"))
        config = dict(self.c, model_type="bert", position_embedding_type="alibi",
                      architectures=["JinaBertForMaskedLM"])
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f)
