r"""Run posjax on a Cloud TPU pod slice: the gcloud commands, printed or run.

    python -m posjax.launch.tpu --slice=v4-32 --name=nezha-pod --zone=us-central2-b \
        --project=my-project --bucket=gs://my-bucket --repo=GIT_URL --dry_run

prints, in order, the commands of docs/tpu_pods.md for that slice: create the slice (queued
resources), install posjax on every worker, launch train.py on every worker (same config,
same workdir on Cloud Storage, the mesh flags of --preset for the slice's shape), TensorBoard,
resume after a preemption (recreate, reinstall, relaunch: train.py resumes from the latest
checkpoint in the workdir, on any slice shape) and evaluate. Without --dry_run, --step names
the one step to run (e.g. --step=launch). Nothing here imports jax: it runs on a laptop.

Exit codes: 0 printed / ran, 2 bad flag (an unknown slice lists the known ones), else the
exit code of the gcloud command that failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys

from posjax.config.cli import fail
from posjax.errors import ConfigError
from posjax.launch import slices

STEPS = ("create", "install", "launch", "tensorboard", "resume", "eval")
PRESETS = ("data", "fsdp", "fsdp_tp")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = "~/posjax-venv"
CHECKOUT = "~/posjax"
EVAL_LENGTHS = "512,1024,2048,4096,8192"


def jax_version(requirements: str = os.path.join(REPO_ROOT, "requirements.txt")) -> str:
    """The jax version requirements.txt pins (the TPU workers install jax[tpu] of it)."""
    try:
        with open(requirements, encoding="utf-8") as f:
            m = re.search(r"^jax==([^\s;]+)", f.read(), re.M)
    except OSError:
        m = None
    return m.group(1) if m else "0.10.2"


def mesh_flags(s: slices.Slice, preset: str) -> list[str]:
    """train.py flags placing the run on the slice's chips.

    data     every chip holds the whole model and LAMB state (BERT-base: ~1.3 GB in float32),
             gradients are all-reduced once per step: the fastest choice while it fits.
    fsdp     parameters and optimizer moments sharded over the chips of one worker (fsdp =
             chips per worker), data parallel across workers: for models that do not fit.
    fsdp_tp  tensor parallel over the chips of one worker, fsdp across workers.
    """
    if preset not in PRESETS:
        raise ConfigError("preset", preset, f"one of {', '.join(PRESETS)}")
    per = s.chips_per_worker
    sizes = {"data": (-1, 1, 1), "fsdp": (-1, per, 1), "fsdp_tp": (1, -1, per)}[preset]
    return [f"--config.mesh.preset={preset}", f"--config.mesh.data={sizes[0]}",
            f"--config.mesh.fsdp={sizes[1]}", f"--config.mesh.tensor={sizes[2]}"]


def worker_env(bucket: str) -> dict[str, str]:
    """Environment of train.py on every worker: unbuffered logs, and one persistent XLA
    compilation cache in the bucket, so a resumed (or relaunched) job skips the compile."""
    return {"PYTHONUNBUFFERED": "1",
            "JAX_COMPILATION_CACHE_DIR": f"{bucket.rstrip('/')}/jax_cache"}


class Plan:
    """Every command for one slice, name and config (lists of argv lists, per step)."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.slice = slices.get(a.slice)
        if not a.bucket.startswith("gs://"):
            raise ConfigError("bucket", a.bucket, "a gs://BUCKET[/prefix] URI (every worker "
                              "writes the same workdir there)")
        bucket = a.bucket.rstrip("/")
        self.workdir = a.workdir or f"{bucket}/runs/{a.name}"
        self.out = f"{bucket}/eval/{a.name}"
        self.train_flags = [f"--config={a.config}", f"--workdir={self.workdir}",
                            *mesh_flags(self.slice, a.preset), "--progress_bar=false",
                            *a.overrides]
        self.env = worker_env(bucket)

    def _where(self) -> list[str]:
        out = [f"--zone={self.a.zone}"]
        return out + ([f"--project={self.a.project}"] if self.a.project else [])

    def _ssh(self, worker: str, command: str) -> list[str]:
        return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", self.a.name, *self._where(),
                f"--worker={worker}", f"--command={command}"]

    def create(self) -> list[list[str]]:
        cmd = ["gcloud", "compute", "tpus", "queued-resources", "create", self.a.name,
               f"--node-id={self.a.name}", *self._where(),
               f"--accelerator-type={self.slice.name}",
               f"--runtime-version={self.slice.runtime}"]
        if self.a.spot:
            cmd.append("--spot")
        wait = ["gcloud", "compute", "tpus", "queued-resources", "describe", self.a.name,
                *self._where(), "--format=value(state.state)"]
        return [cmd, wait]

    def install(self) -> list[list[str]]:
        """The same script on every worker: checkout, venv, pinned requirements, jax[tpu]
        of the pinned version, gcsfs + google-cloud-storage (gs:// workdirs)."""
        script = " && ".join([
            f"(test -d {CHECKOUT} || git clone {shlex.quote(self.a.repo)} {CHECKOUT})",
            f"cd {CHECKOUT}", "git fetch --all --tags", f"git checkout {shlex.quote(self.a.ref)}",
            f"python3 -m venv {VENV}",
            f"{VENV}/bin/pip install -q -r requirements.txt",
            f"{VENV}/bin/pip install -q 'jax[tpu]=={jax_version()}' gcsfs google-cloud-storage",
            f"{VENV}/bin/pip install -q -e .",
        ])
        return [self._ssh("all", script)]

    def worker_command(self, worker: int) -> str:
        """What worker `worker` runs: train.py in the background (it survives the ssh
        session), its output in ~/posjax-train-<worker>.log. JAX finds the slice's other
        workers itself (Cloud TPU VM metadata): no coordinator flags."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        flags = " ".join(shlex.quote(f) for f in self.train_flags)
        return (f"cd {CHECKOUT} && {env} nohup {VENV}/bin/python train.py {flags} "
                f"> ~/posjax-train-{worker}.log 2>&1 &")

    def launch(self) -> list[list[str]]:
        return [self._ssh(str(i), self.worker_command(i)) for i in range(self.slice.workers)]

    def tensorboard(self) -> list[list[str]]:
        """On your machine: mirror <workdir>/tb every minute, and serve it."""
        local = f"./tb-{self.a.name}"
        sync = (f"while true; do gcloud storage rsync --recursive {self.workdir}/tb {local}; "
                "sleep 60; done")
        return [["bash", "-c", f"mkdir -p {local} && ({sync}) & tensorboard --logdir {local}"]]

    def resume(self) -> list[list[str]]:
        """After a preemption: the slice is gone; delete its queued resource, create it again
        (any slice shape with this config's batch size), reinstall and relaunch: train.py
        resumes from the newest complete checkpoint in the workdir."""
        delete = ["gcloud", "compute", "tpus", "queued-resources", "delete", self.a.name,
                  *self._where(), "--force", "--quiet"]
        return [delete, *self.create(), *self.install(), *self.launch()]

    def eval(self) -> list[list[str]]:
        """Evaluate the run's latest checkpoint on worker 0 alone (eval.py is one process):
        the TPU_* variables give that process worker 0's own chips only."""
        per = self.slice.chips_per_worker
        bounds = {1: "1,1,1", 4: "2,2,1", 8: "2,4,1"}.get(per, "2,2,1")
        env = ""
        if self.slice.workers > 1:
            env = ("TPU_PROCESS_BOUNDS=1,1,1 "
                   f"TPU_CHIPS_PER_PROCESS_BOUNDS={bounds} "
                   f"TPU_VISIBLE_CHIPS={','.join(str(i) for i in range(per))} ")
        command = (f"cd {CHECKOUT} && {env}{VENV}/bin/python eval.py --workdir={self.workdir} "
                   f"--out={self.out} --lengths={EVAL_LENGTHS}")
        return [self._ssh("0", command)]

    def steps(self) -> dict[str, list[list[str]]]:
        return {s: getattr(self, s)() for s in STEPS}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m posjax.launch.tpu",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--slice", required=True, help="accelerator type, e.g. v4-32, v5litepod-16")
    p.add_argument("--name", required=True, help="TPU VM / queued-resource name")
    p.add_argument("--zone", required=True)
    p.add_argument("--project", default=None, help="default: gcloud's configured project")
    p.add_argument("--bucket", required=True, help="gs://BUCKET[/prefix]: workdir and results")
    p.add_argument("--config", default="configs/nezha.py:base")
    p.add_argument("--workdir", default=None, help="default: <bucket>/runs/<name>")
    p.add_argument("--preset", default="data", help=f"mesh preset: {', '.join(PRESETS)}")
    p.add_argument("--repo", required=True, help="git URL of the posjax repository to install")
    p.add_argument("--ref", default="main", help="git branch, tag or commit to install")
    p.add_argument("--spot", action="store_true", help="Spot capacity (preemptible)")
    p.add_argument("--step", default=None, help=f"run one step: {', '.join(STEPS)}")
    p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
    p.add_argument("overrides", nargs="*", help="extra train.py flags, after --, e.g. "
                   "-- --config.train.steps=100000")
    return p.parse_args(argv)


def render(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def main(argv=None) -> int:
    try:
        a = parse(sys.argv[1:] if argv is None else argv)
        bad = [o for o in a.overrides if not o.startswith("--config.")]
        if bad:
            raise ConfigError("overrides", bad[0], "train.py config overrides (--config.<field>=...)")
        if a.step is not None and a.step not in STEPS:
            raise ConfigError("step", a.step, f"one of {', '.join(STEPS)}")
        plan = Plan(a)
    except ConfigError as e:
        fail(str(e))
    chosen = STEPS if a.step is None else (a.step,)
    if a.dry_run:
        s = plan.slice
        print(f"# {s.name}: {s.chips} chips on {s.workers} worker(s), "
              f"{s.chips_per_worker} per worker; workdir {plan.workdir}")
        for step, cmds in plan.steps().items():
            if step in chosen:
                print(f"\n# {step}")
                for cmd in cmds:
                    print(render(cmd))
        return 0
    if a.step is None:
        fail("--step is required without --dry_run (run one step at a time: "
             f"{', '.join(STEPS)})")
    for cmd in plan.steps()[a.step]:
        print(f"+ {render(cmd)}", flush=True)
        code = subprocess.call(cmd)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
