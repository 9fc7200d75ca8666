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

from tests.reliability import runner

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


def test_no_involuntary_rematerialization_under_any_preset():
    proc = subprocess.run([sys.executable, WORKER], cwd=runner.REPO, env=_env(),
                          capture_output=True, text=True, timeout=600)
    log = proc.stderr
    assert proc.returncode == 0 and "compiled" in log, log[-4000:]
    parts = sections(log)
    assert set(parts) == {"canary", "data", "fsdp", "fsdp_tp"}, sorted(parts)
    assert WARNING in parts["canary"], "the canary compiled without the warning:\n" + log[-4000:]
    bad = {name: text for name, text in parts.items() if name != "canary" and WARNING in text}
    assert not bad, "\n\n".join(f"{name}:\n{text[:3000]}" for name, text in bad.items())
    # nothing outside the marked sections either
    outside = re.sub(r"^=== BEGIN (\S+)\n.*?^=== END \1$", "", log, flags=re.MULTILINE | re.DOTALL)
    assert WARNING not in outside, outside[-3000:]
