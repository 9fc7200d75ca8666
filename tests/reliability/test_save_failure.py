"""A save that fails in orbax's background threads (its directory removed mid-save) is ONE
posjax warning line on stderr: orbax's own ERROR records and tracebacks are filtered out
(posjax.training.checkpoints._QuietOrbax). A subprocess, so stderr is exactly what a user sees.
"""

import os
import subprocess
import sys

from tests.reliability import runner
import pytest

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

SCRIPT = r"""
import os, shutil, sys
import jax.numpy as jnp
from orbax.checkpoint._src.path import atomicity
from posjax.training.checkpoints import Checkpointer
wd = sys.argv[1]
path = os.path.join(wd, "checkpoints")
commit = atomicity.AtomicRenameTemporaryPath.finalize

async def finalize(self):
    # the folder disappears under the save in flight, after the arrays are written and before
    # orbax commits them: deterministic, unlike racing a background thread from here
    shutil.rmtree(path)
    await commit(self)

atomicity.AtomicRenameTemporaryPath.finalize = finalize
c = Checkpointer(wd, every=1, keep=3)
c.save(1, {"a": jnp.ones((200, 100))}, {"x": 1})  # async: written in background threads
print("saved:", c.wait(), "latest:", c.latest_step())
c.close()
"""

def test_failed_save_is_one_line(tmp_path):
    env = runner.make_env()
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "wd")], cwd=runner.REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "saved: False latest: None", out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    where = os.path.join(str(tmp_path / "wd"), "checkpoints")
    assert lines[0].startswith(f"warning: saving the last checkpoint in {where} failed ("), lines
    assert lines[0].endswith("; training continues; latest complete checkpoint: none"), lines
