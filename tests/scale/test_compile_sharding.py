"""Every preset compiles without the SPMD partitioner replicating a whole tensor.

One subprocess with 8 simulated CPU devices (tests/scale/compile_worker.py) lowers and
compiles, never runs, the train step under 'data', 'fsdp' and 'fsdp_tp' for a learned table,
RoPE, T5 and NEZHA (and the eval step under 'fsdp_tp'), tiny shapes. XLA warns
"Involuntary full rematerialization" whenever it can only reach an operand's sharding by
replicating it and splitting it again: an all-gather of the whole activation per step, for
nothing (issue 22: the word embedding lookup, forward, backward and eval). The check reads
the compile log the subprocess writes to stderr.

The subprocess uses no persistent compilation cache: a cache hit skips the partitioner and
its warnings, and the check would pass without having looked. A canary program that is known
to trigger the warning compiles first, so a log that lost XLA's warnings fails the test too.
"""

import os
import re
import subprocess
import sys

import pytest

from posjax.training import collectives as col
from tests.reliability import runner
from tests.scale import compile_worker

# Slow tier: several processes or simulated devices (meshes).
pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "compile_worker.py")
WARNING = "Involuntary full rematerialization"


def _env() -> dict:
    env = runner.make_env()
    env["XLA_FLAGS"] = runner.xla_flags(8)  # fast compile too: partitioning is unchanged
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # compile for real (see the module docstring)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the warnings are logged at WARNING level
    return env


def sections(log: str) -> dict[str, str]:
    """Program name -> the log lines written while it compiled (the worker's markers)."""
    found = re.findall(r"^=== BEGIN (\S+)\n(.*?)^=== END \1$", log, re.MULTILINE | re.DOTALL)
    return dict(found)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The worker's compile log (stderr) and the directory of its partitioned programs."""
    hlo_dir = tmp_path_factory.mktemp("hlo")
    proc = subprocess.run([sys.executable, WORKER, f"--hlo_dir={hlo_dir}"], cwd=runner.REPO,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "compiled" in proc.stderr, proc.stderr[-4000:]
    return proc.stderr, hlo_dir


def test_no_involuntary_rematerialization_under_any_preset(compiled):
    log = compiled[0]
    parts = sections(log)
    assert set(parts) == {"canary", "data", "fsdp", "fsdp_tp"}, sorted(parts)
    assert WARNING in parts["canary"], "the canary compiled without the warning:\n" + log[-4000:]
    bad = {name: text for name, text in parts.items() if name != "canary" and WARNING in text}
    assert not bad, "\n\n".join(f"{name}:\n{text[:3000]}" for name, text in bad.items())
    # nothing outside the marked sections either
    outside = re.sub(r"^=== BEGIN (\S+)\n.*?^=== END \1$", "", log, flags=re.MULTILINE | re.DOTALL)
    assert WARNING not in outside, outside[-3000:]


def _table_collectives(hlo: str, rows: int) -> dict[str, int]:
    """Kind -> how many collectives move an f32 array of the word table's shape [rows, 32]."""
    found = {}
    for line in hlo.splitlines():
        m = col._INSTR.match(line)
        if m:
            shapes = col._SHAPE.findall(m.group(1))
            n = sum(1 for dtype, dims in shapes
                    if dtype == "f32" and re.fullmatch(rf"(1,)?{rows},32", dims))
            if n:
                found[m.group(2)] = found.get(m.group(2), 0) + n
    return found


def test_tied_word_table_is_gathered_once_and_its_gradient_reduced_once(compiled):
    # The table serves the lookup and the tied MLM head (Embed.shared). Per train step: one
    # all-gather of it where it is split over 'fsdp' (before: one per use), and one reduction
    # of its gradient, the two uses' parts added first (before: one per use). The eval step
    # (under 'fsdp_tp') gathers it once more. Shapes: [VOCAB, 32], rows split over 'tensor'
    # in 'fsdp_tp'.
    steps = len(compile_worker.SCHEMES)
    vocab = compile_worker.VOCAB
    want = {"data": (vocab, {"all-reduce": steps}),
            "fsdp": (vocab, {"all-gather": steps, "all-reduce": steps}),
            "fsdp_tp": (vocab // 2, {"all-gather": 2 * steps, "all-reduce": steps})}
    for preset, (rows, expected) in want.items():
        hlo = (compiled[1] / f"{preset}.hlo").read_text()
        got = _table_collectives(hlo, rows)
        # XLA:CPU lowers a reduce-scatter as an all-reduce and a slice: count them together
        got["all-reduce"] = got.get("all-reduce", 0) + got.pop("reduce-scatter", 0)
        assert got == expected, (preset, got)
