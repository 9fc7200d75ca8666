"""Every command in README.md's ```bash blocks runs as written, in order, from a fresh folder:
the README cannot drift from the code again.

How it runs: the blocks are read from README.md, joined at their `\\` line ends, split at
`&&`, and run one by one in a temporary folder that holds links to train.py, eval.py and
configs/ (PYTHONPATH names this checkout), so `workdirs/...` and `runs/...` land there and
each command sees what the ones before it made (the Quick start's `workdirs/nezha` is what the
eval chain reads).

Shrunk, because the real commands take minutes to hours (flags appended after the README's own;
for absl and for --config.* overrides the last one wins):
  - `train.py`: TRAIN_SHRINK, a 1-layer model of width 32 on 300 documents, 2 steps.
  - `eval.py`: EVAL_SHRINK, length 64 (twice the training length) with 64 masked tokens;
    a recovery curve of 0 and 1 steps at length 64 when the command asks for one.
  - an experiment config (`eval.py --config=configs/experiments/X.py`): its own `:tiny`
    variant (the size its plumbing tests use).

Not run, each for a stated reason (SKIPPED): installs, the test suite itself, SLURM, and
anything that would reach Google Cloud. A command matching none of these and failing fails
the test, as does a README without the commands this test expects to find.

Side by side: a command starts once every earlier command it shares a name with has finished
(`depends_on`: the names are the last parts of its path arguments, `workdirs/nezha` and
`configs/nezha.py` both name `nezha`, a config's `:variant` adds `nezha_variant`, train.py's
default workdir). Commands that share no name (the Quick start's chain, the BERT chain, the
experiment, the launcher) run at the same time, at most PARALLEL at once; within a chain the
README's order holds, so each command still sees what the ones before it made.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.reliability import runner

pytestmark = pytest.mark.slow  # 11 commands shrunk: train, eval, convert, an experiment (11 min on 2 busy cores)
PARALLEL = 3  # commands at once (module docstring): most of a command is one busy core

REPO = runner.REPO
README = os.path.join(REPO, "README.md")
LINKED = ("train.py", "eval.py", "configs")  # what the commands name by relative path

# (pattern matched against the whole command, why it is not run here)
SKIPPED = (
    (r"^pip install ", "installs packages: CI does these before the tests"),
    (r"-m pytest\b", "the test suite itself: CI runs it"),
    (r"^srun ", "needs a SLURM cluster"),
    (r"^(?!.*--dry_run).*gs://", "would reach Google Cloud (a real TPU slice or bucket)"),
)

TRAIN_SHRINK = [
    "--config.model.hidden=32", "--config.model.num_layers=1", "--config.model.num_heads=2",
    "--config.model.mlp_dim=64", "--config.model.max_length=64", "--config.data.seq_len=32",
    "--config.data.batch_size=4", "--config.data.max_documents=300",
    "--config.data.vocab_size=1000", "--config.train.steps=2", "--config.train.warmup_steps=0",
    "--config.train.log_every=1", "--config.train.eval_every=0",
    "--config.train.checkpoint_every=2", "--progress_bar=false",
]
EVAL_SHRINK = ["--lengths=64", "--masked_tokens=64", "--batch_tokens=512"]
RECOVERY_SHRINK = ["--recovery_steps=0,1", "--continue_length=64"]


def readme_commands(text: str) -> list[str]:
    """The commands of every ```bash block, in order (continuations joined, && split)."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(shlex.split(line, comments=True))  # drops a trailing comment
            commands += [c.strip() for c in line.split("&&") if c.strip()]
    return commands


def skip_reason(command: str):
    return next((why for pattern, why in SKIPPED if re.search(pattern, command)), None)


def shrink(argv: list[str]) -> list[str]:
    """argv of a README command with the test-size flags above."""
    script = argv[1] if len(argv) > 1 else ""
    if script == "train.py":
        return argv + TRAIN_SHRINK
    if script == "eval.py":
        argv = [a + ":tiny" if a.startswith("--config=configs/experiments/") and ":" not in a
                else a for a in argv]
        extra = EVAL_SHRINK
        if any(a.startswith("--recovery_steps") for a in argv):
            extra = extra + RECOVERY_SHRINK
        return argv + extra
    return argv


def split_env(argv: list[str]) -> tuple[dict, list[str]]:
    """Leading NAME=value words (the shell's per-command environment) apart from the argv."""
    env = {}
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        name, _, value = argv.pop(0).partition("=")
        env[name] = value
    return env, argv


def names(argv: list[str]) -> set[str]:
    """What a command names (module docstring, Side by side): the last part of each path
    argument without its extension (`workdirs/nezha`, `configs/nezha.py`: `nezha`), and
    `name_variant` for a `path:variant` (train.py's default workdir, workdirs/<name>_<variant>)."""
    out = set()
    for arg in argv[1:]:
        value = arg.partition("=")[2] if arg.startswith("-") else arg
        path, _, variant = value.partition(":")
        if "/" not in path or "://" in path:
            continue
        name = os.path.splitext(os.path.basename(path.rstrip("/")))[0]
        out.add(name)
        if variant:
            out.add(f"{name}_{variant}")
    return out


def depends_on(argvs: list[list[str]]) -> list[set[int]]:
    """For each command, the earlier ones it waits for: those sharing a name with it."""
    named = [names(a) for a in argvs]
    return [{j for j in range(i) if named[i] & named[j]} for i in range(len(argvs))]


def test_commands_that_name_the_same_run_wait_for_each_other():
    argvs = [shlex.split(c) for c in (
        "python train.py --config=configs/nezha.py",  # 0: writes workdirs/nezha
        "python train.py --config=configs/tiny.py:rope",  # 1: workdirs/tiny_rope
        "python eval.py --workdir=workdirs/nezha --out=runs/eval_nezha",  # 2: reads 0
        "python eval.py --workdir=workdirs/tiny_rope --out=runs/x --reuse=runs/eval_nezha",
        "python -m posjax.convert --to_hf workdirs/nezha --out hf/nezha",  # 4: reads 0
        "python -m posjax.launch.tpu --bucket=gs://B --repo=GIT_URL --dry_run")]
    assert depends_on(argvs) == [set(), set(), {0}, {1, 2}, {0, 2}, set()]


def test_readme_parsing_finds_the_chain():
    commands = readme_commands(open(README, encoding="utf-8").read())
    ran = [c for c in commands if skip_reason(c) is None]
    # the Quick start's training comes first, then the eval chain reads its workdir
    assert ran[0] == "python train.py --config=configs/nezha.py", ran
    assert any(c.startswith("python eval.py --workdir=workdirs/nezha ") for c in ran), ran
    assert any("posjax.launch.tpu" in c and "--name=" in c for c in ran), ran
    assert {skip_reason(c) for c in commands} >= {why for _, why in SKIPPED[:3]}


def test_every_readme_command_runs_as_written(tmp_path):
    for name in LINKED:
        os.symlink(os.path.join(REPO, name), tmp_path / name)
    env = runner.make_env()
    env["POSJAX_HUGE_PAGES"] = "0"  # one process per command (no re-exec): cheaper here
    commands = [c for c in readme_commands(open(README, encoding="utf-8").read())
                if skip_reason(c) is None]
    parsed = [split_env(shlex.split(c)) for c in commands]
    for command, (_, argv) in zip(commands, parsed):
        assert argv[0] == "python", f"README command not understood by this test: {command}"
    waits = depends_on([argv for _, argv in parsed])
    t0 = time.monotonic()

    def run(i):
        for j in waits[i]:
            futures[j].result()  # raises if that one failed: this one is not started
        command, (extra_env, argv) = commands[i], parsed[i]
        t = time.monotonic()
        r = subprocess.run([sys.executable, *shrink(argv)[1:]], cwd=tmp_path,
                           env=dict(env, **extra_env), capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, (f"README command failed ({r.returncode}): {command}\n"
                                   f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        output = r.stdout + r.stderr
        assert "\r" not in output, f"a progress bar drawn into a pipe: {command}"
        if "--recovery_steps" in command:  # a first continued-training run starts, not resumes
            assert "starting from the step-0 checkpoint" in output, output[-3000:]
            assert "resuming from step 0" not in output, output[-3000:]
            assert " done (" not in output, output[-3000:]  # the plan: nothing done before
        print(f"{round(time.monotonic() - t):>4}s  {command}", flush=True)  # pytest -s
        return command

    # earlier commands are submitted (and so started) first: a waiting one never holds up
    # a command it waits for
    futures = []
    with ThreadPoolExecutor(PARALLEL) as pool:
        for i in range(len(commands)):
            futures.append(pool.submit(run, i))
        ran = [f.result() for f in futures]  # the first failure, in README order, is raised
    assert len(ran) >= 7, ran
    assert (tmp_path / "runs" / "compare" / "results.json").exists()
    assert (tmp_path / "runs" / "eval_bert" / "recovery.png").exists()
    print(f"ran {len(ran)} README commands in {time.monotonic() - t0:.0f}s")
