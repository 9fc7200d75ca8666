"""The kernel with llama3 / longrope / proportional RoPE: the kernel only sees their frequencies
(per row for longrope) and logit scale, so a forward check against the reference suffices."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from posjax.attention import attend
from posjax.kernels import flash_attention

CASES = {
    # rows whose largest position is below / above L = 12: short vs long factors per row
    "longrope": {"name": "rope", "scaling": "longrope", "factor": 4.0, "original_length": 12,
                 "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [1.0, 2.0, 4.0, 9.0],
                 "rotary_dim": 8, "interleaved": False},
    # 2 of 8 pairs keep a frequency (base**(-2i/16)); the other 6 turn by angle 0
    "proportional": {"name": "rope", "scaling": "proportional", "rotary_fraction": 0.25,
                     "factor": 2.0},
    "llama3": {"name": "rope", "scaling": "llama3", "factor": 4.0, "original_length": 16,
               "low_freq_factor": 1.5, "high_freq_factor": 3.0, "interleaved": False},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_matches_reference(case, kc):
    scheme, params = kc.scheme(CASES[case])
    q, k, v, _ = kc.inputs(2, 20, 20, jnp.float32, seed=4)
    pos = jnp.asarray([list(range(10)) * 2, list(range(20))], jnp.int32)  # max 9 / 19
    out = flash_attention(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                          block_q=16, block_k=16)
    ref = attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                 implementation="reference")
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), **kc.F32_TOL)
