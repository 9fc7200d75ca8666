"""A save that fails in orbax's background threads (its directory removed mid-save) is ONE
posjax warning line on stderr: orbax's own ERROR records and tracebacks are filtered out
(posjax.training.checkpoints._QuietOrbax). A subprocess, so stderr is exactly what a user sees.
"""

import os
import subprocess
import sys

from tests.reliability import runner

SCRIPT = r"""
import os, shutil, sys
import jax.numpy as jnp
from posjax.training.checkpoints import Checkpointer
wd = sys.argv[1]
c = Checkpointer(wd, every=1, keep=3)
state = {"a": jnp.ones((2000, 1000))}
path = os.path.join(wd, "checkpoints")
for step in range(1, 6):  # a fast disk may finish a save before the folder is gone: retry
    c.save(step, state, {"x": step})  # async: the arrays are written in background threads
    os.rename(path, path + ".gone")  # the folder disappears under the save in flight
    shutil.rmtree(path + ".gone")
    if not c.wait():
        break
print("failed at", step, "latest:", c.latest_step())
c.close()
"""

def test_failed_save_is_one_line(tmp_path):
    env = runner.make_env(str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "wd")], cwd=runner.REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("failed at ") and out.stdout.strip().endswith("latest: None"), (
        out.stdout + out.stderr)
    failed_at = int(out.stdout.split()[2])
    lines = out.stderr.strip().splitlines()
    disappeared = [line for line in lines if "disappeared during the run" in line]
    # at most one per retry (none when orbax recreated the folder before the next save)
    assert len(disappeared) <= failed_at - 1, out.stderr
    failed = [line for line in lines if line not in disappeared]
    assert len(failed) == 1, out.stderr
    where = os.path.join(str(tmp_path / "wd"), "checkpoints")
    assert failed[0].startswith(f"warning: saving the last checkpoint in {where} failed ("), lines
    assert failed[0].endswith("; training continues; latest complete checkpoint: none"), lines
