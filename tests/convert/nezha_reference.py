"""A torch NEZHA in the transformers 4.x layout, for parity tests.

transformers 5.x (the version pinned in requirements-hf.txt, the newest that runs with the
posjax-pinned tokenizers 0.23.3) removed the deprecated NEZHA model, and 4.x requires
tokenizers <= 0.23.0. This module re-implements `NezhaForMaskedLM` from the 4.x
models/deprecated/nezha/modeling_nezha.py semantics with the SAME state-dict names:
  NezhaRelativePositionsEncoding: table [2K+1, D], table[r, 0::2] = sin(r * div),
      table[r, 1::2] = cos(r * div), div = exp(arange(0, D, 2) * -ln(10000)/D);
      r_ij = table[clip(j - i, -K, K) + K]
  NezhaSelfAttention: scores = (q.k + q.r_ij) / sqrt(D) + mask; p = softmax;
      context = p.v + sum_j p_ij r_ij
  embeddings: word + token type (no absolute positions) -> LayerNorm; BERT post-LN layers and
  BERT's MLM head (cls.predictions.*).
"""

from __future__ import annotations

import json
import math
import os

import torch
from torch import nn


def relative_table(length: int, depth: int, k: int) -> torch.Tensor:
    rows = 2 * k + 1
    position = torch.arange(rows, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, depth, 2).float() * (-math.log(10000.0) / depth))
    table = torch.zeros(rows, depth)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    rng = torch.arange(length)
    index = torch.clamp(rng[None, :] - rng[:, None], -k, k) + k  # [i, j] = j - i
    return table[index]  # [L, L, D]


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

    def forward(self, x, mask_add, rel):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.heads, self.d).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, rel)
        probs = torch.softmax(scores / math.sqrt(self.d) + mask_add, dim=-1)
        ctx = probs @ v + torch.einsum("bhij,ijd->bhid", probs, rel)
        return ctx.transpose(1, 2).reshape(b, n, -1)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, eps = c["hidden_size"], c["layer_norm_eps"]
        self.attention = nn.Module()
        self.attention.self = SelfAttention(h, c["num_attention_heads"])
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(h, h)
        self.attention.output.LayerNorm = nn.LayerNorm(h, eps=eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(h, c["intermediate_size"])
        self.output = nn.Module()
        self.output.dense = nn.Linear(c["intermediate_size"], h)
        self.output.LayerNorm = nn.LayerNorm(h, eps=eps)

    def forward(self, x, mask_add, rel):
        a = self.attention.output
        x = a.LayerNorm(x + a.dense(self.attention.self(x, mask_add, rel)))
        h = nn.functional.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(x + self.output.dense(h))


class NezhaForMaskedLM(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.c = c
        h, eps = c["hidden_size"], c["layer_norm_eps"]
        self.nezha = nn.Module()
        e = self.nezha.embeddings = nn.Module()
        e.word_embeddings = nn.Embedding(c["vocab_size"], h)
        e.token_type_embeddings = nn.Embedding(c["type_vocab_size"], h)
        e.LayerNorm = nn.LayerNorm(h, eps=eps)
        self.nezha.encoder = nn.Module()
        self.nezha.encoder.layer = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        p = nn.Module()
        p.transform = nn.Module()
        p.transform.dense = nn.Linear(h, h)
        p.transform.LayerNorm = nn.LayerNorm(h, eps=eps)
        p.bias = nn.Parameter(torch.zeros(c["vocab_size"]))
        self.cls = nn.Module()
        self.cls.predictions = p

    def forward(self, input_ids, attention_mask, token_type_ids):
        e = self.nezha.embeddings
        x = e.LayerNorm(e.word_embeddings(input_ids) + e.token_type_embeddings(token_type_ids))
        mask_add = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        n = input_ids.shape[1]
        rel = relative_table(n, self.c["hidden_size"] // self.c["num_attention_heads"],
                             self.c["max_relative_position"])
        for layer in self.nezha.encoder.layer:
            x = layer(x, mask_add, rel)
        p = self.cls.predictions
        t = p.transform.LayerNorm(nn.functional.gelu(p.transform.dense(x)))
        return x, t @ e.word_embeddings.weight.T + p.bias

    def save_pretrained(self, path: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()},
                  os.path.join(path, "model.safetensors"))
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(dict(self.c, model_type="nezha", architectures=["NezhaForMaskedLM"]), f)
