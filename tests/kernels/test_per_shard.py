"""flash_attention(shard_axes=...) runs the kernels per (batch, head) shard in shard_map (a
Pallas kernel cannot be partitioned by XLA): on 4 simulated CPU devices (a subprocess, see
per_shard_main.py) its values and gradients, including per-head parameters split with the
heads (T5, DeBERTa), a shared table whose gradient is summed over shards (Shaw) and FoX's
per-head token sums as a local layer (the band's check flag split with the batch), equal the
unsharded call. That it compiles for a real TPU slice is in test_lowering_tpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import pytest

# Slow tier: several processes or simulated devices (meshes).
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sharded_equals_unsharded():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", "tests.kernels.per_shard_main"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    diffs = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(diffs) == ["deberta", "fox", "shaw", "t5"]
    for name, diff in diffs.items():
        assert diff < 1e-4, (name, diff)
