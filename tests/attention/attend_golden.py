"""Golden records of `attend` for one registered scheme per attention hook (SCHEMES: every
hook attention calls is filled by one of them): a few numbers of the output and of the
gradients (q, k, v and the scheme's params) on the reference and chunked paths (rows runs the
reference's softmax_rows), with padding and small blocks. attend_golden.json holds them as
computed before the `carried_scores` hook was added (xl's: before `content_factors` replaced its
`content_logits`, by the code of that time); test_attend_golden.py recomputes them and
requires the same numbers to float tolerance (the paths stay free to reorder float operations).
One scheme per hook, not all: a record costs ~5 s of compiling on a 2-core CPU.
Regenerate (only when a change of behaviour is intended, and say which records changed and why
in the commit):

    JAX_PLATFORMS=cpu python -m tests.attention.attend_golden
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from posjax import positions
from posjax.attention import attend
from posjax.positions.base import Dims

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attend_golden.json")
B, L, H, D = 2, 9, 2, 8
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64, vocab_size=32)
PATHS = ("reference", "chunked")
# One scheme per attention hook (rotate, bias, content_logits + content_values, scores,
# prepare + token_bias, count_gates + count_logits, length_scale, map_logits, normalize,
# content_factors) and none (plain attention), each in one direction (causal?), both
# directions between them; stick-breaking's sides in both.
SCHEMES = {"none": (False,), "rope": (True,), "alibi": (False,), "shaw": (True,),
           "rerope": (False,), "fox": (True,), "cope": (False,), "ssmax": (True,),
           "dape": (False,), "stick_breaking": (False, True), "xl": (False,)}


def _digest(x) -> list:
    """[sum, sum of |x|, four entries], 8 significant digits."""
    x = np.asarray(x, np.float64).ravel()
    picks = x[np.linspace(0, x.size - 1, 4).astype(int)]
    return [float(f"{v:.8g}") for v in [x.sum(), np.abs(x).sum(), *picks]]


def record(name: str, causal: bool) -> dict:
    """path -> {"out": digest, "grads": [digest of dq, dk, dv, every param leaf]}."""
    scheme = positions.make(name).bind(dataclasses.replace(DIMS, causal=causal))
    params = scheme.init_layer(jax.random.key(1))
    rng = np.random.RandomState(0)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32) + 3, (B, L))
    kv_mask = jnp.asarray(np.arange(L)[None] < np.array([[L], [6]]))

    def run(impl):
        def f(q, k, v, params):
            return attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                          kv_mask=kv_mask, causal=causal, implementation=impl, block_q=4,
                          block_k=4)
        grads = jax.grad(lambda *a: (f(*a) * ct).sum(), (0, 1, 2, 3))(q, k, v, params)
        return f(q, k, v, params), jax.tree.leaves(grads)

    results = jax.jit(lambda: {impl: run(impl) for impl in PATHS})()
    return {impl: {"out": _digest(out), "grads": [_digest(g) for g in grads]}
            for impl, (out, grads) in results.items()}


def cases() -> list:
    """[(record key, scheme name, causal)]."""
    return [(f"{name}|{'causal' if c else 'bidirectional'}", name, c)
            for name, directions in SCHEMES.items() for c in directions]


if __name__ == "__main__":
    golden = {key: record(name, causal) for key, name, causal in cases()}
    with open(GOLDEN, "w") as f:  # one line per record
        f.write("{\n" + ",\n".join(f"{json.dumps(key)}: {json.dumps(golden[key])}"
                                     for key in sorted(golden)) + "\n}\n")
    print(f"wrote {len(golden)} records to {GOLDEN}")
