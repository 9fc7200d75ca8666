r"""Pretrain a Transformer with a chosen position encoding (MLM, or causal LM).

    python train.py --config=configs/nezha.py                 # CPU default, real text, minutes
    python train.py --config=configs/nezha.py:tiny            # seconds (tests)
    python train.py --config=configs/nezha.py:base --workdir=/ckpt/nezha-base
    python train.py --config=configs/rope.py --config.train.steps=1000 --config.position.scaling=ntk

Configs and position schemes (with their fields) are listed by `python -m posjax list`.

Multi-host (same command on every host; see README 'Scaling out'): TPU pod slices and SLURM srun
are detected; elsewhere pass --coordinator_address=host0:1234 --num_processes=N --process_id=i.

Run it again with the same --workdir to resume from the latest checkpoint (a damaged one is
moved to <workdir>/checkpoints.corrupt/ with a warning and the one before is used). Exit codes:
0 done (or stopped cleanly by SIGTERM/SIGINT after saving), 1 training failure (a non-finite
loss with train.nan_policy='stop', the final checkpoint could not be written, or the processes
of a multi-process run did not all arrive within --init_timeout), 2 bad config,
data, vocabulary or workdir (one line on stderr, nothing compiled), 128+N killed by a second
signal N while saving (the previous checkpoint is intact). Per-step metrics at full precision
go to <workdir>/metrics.jsonl.
"""

# ---------------------------------------------------------------------------------------------
# Imports and flags
# ---------------------------------------------------------------------------------------------
import os
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from posjax import startup
from posjax.config.cli import config_error, fail, parse_flags
from posjax.errors import ConfigError

config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with a variant: configs/nezha.py[:tiny|base].",
    lock_config=True)
flags.DEFINE_string("workdir", None, "Where checkpoints, config.json, vocab.txt and TensorBoard "
                    "events go. Default: ./workdirs/<config name>[_<variant>].")
flags.DEFINE_bool("progress_bar", None, "Show the tqdm bar (default: when stderr is a terminal).")
# Multi-host (posjax.training.multihost). Default: detected from the environment (SLURM srun,
# Open MPI, JAX_COORDINATOR_ADDRESS, Cloud TPU VM); these flags name the cluster explicitly.
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (with --num_processes "
                    "and --process_id): start jax.distributed with these.")
flags.DEFINE_integer("num_processes", None, "Number of processes in the run (explicit launch).")
flags.DEFINE_integer("process_id", None, "This process's index in [0, num_processes).")
flags.DEFINE_integer("init_timeout", 300, "Seconds to wait at start-up for every process of a "
                     "multi-process run to reach the coordinator; then one error line, exit 1.")
flags.DEFINE_bool("distributed", None, "Force jax.distributed.initialize() on (jax detects the "
                  "cluster) or off; default: on when flags or the environment name a cluster.")
FLAGS = flags.FLAGS



def default_workdir(config_arg: str) -> str:
    path, _, variant = config_arg.partition(":")
    name = os.path.splitext(os.path.basename(path))[0]
    return os.path.join("workdirs", f"{name}_{variant}" if variant else name)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
def main(argv):
    # Start-up (JAX import, data, vocabulary, restore) is interruptible from here on: a
    # SIGTERM/SIGINT before training begins is a clean stop, one line and exit 0, instead of
    # the default action (posjax.training.signals; train_and_evaluate installs its own too).
    from posjax.training import signals
    with signals.GracefulStop(startup=True):
        try:
            _main(argv)
        except signals.Interrupted as e:
            print(signals.startup_message(e.signal_name, _workdir()), flush=True)
            if e.exit_now:  # jax.distributed still waits in a thread Python cannot stop
                sys.stderr.flush()
                os._exit(0)


def _workdir() -> str:
    return FLAGS.workdir or default_workdir(config_flags.get_config_filename(FLAGS["config"]))


def _main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments {argv[1:]}; use --config.<field>=<value> to change fields")
    if FLAGS.config is None:
        fail("--config is required, e.g. --config=configs/nezha.py")
    try:
        config = FLAGS.config
        config.keys()  # config_flags reports a file that failed to load only on first use
    except OSError as e:
        error = config_error(e)
        fail(str(error) if error is not None else " ".join(str(e).split()))
    # Every field checked before anything touches the workdir or compiles (posjax.config.validation).
    from posjax.config.validation import validate
    try:
        validate(config)
    except ConfigError as e:
        fail(str(e))
    workdir = _workdir()
    from posjax import storage  # gs:// without its filesystem package: one line, nothing written
    try:
        storage.check_filesystem(workdir)
    except ConfigError as e:
        fail(str(e))

    # Orbax logs every save at INFO through absl; keep the console to posjax's own lines.
    absl_logging.set_verbosity(absl_logging.WARNING)

    # Multi-host: must run before anything touches a jax backend.
    from posjax.training import multihost
    try:
        multihost.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id,
                             mode=FLAGS.distributed, timeout_s=FLAGS.init_timeout)
    except ConfigError as e:
        fail(str(e))
    except multihost.StartupTimeout as e:
        fail(str(e), code=1, now=True)

    # A rerun of the same programs skips XLA's compile (posjax/compilation_cache.py).
    from posjax import compilation_cache
    compilation_cache.enable()

    # Import late: JAX starts up here, after flags are known to be fine.
    from posjax.training import train_and_evaluate
    from posjax.training.checkpoints import CheckpointFailed
    from posjax.training.loop import NonFiniteLoss

    # -- train ---------------------------------------------------------------------------------
    # Every ConfigError is raised before the first compile (checks run first in the loop).
    try:
        summary = train_and_evaluate(config, workdir, progress_bar=FLAGS.progress_bar)
    except ConfigError as e:
        fail(str(e))
    except (NonFiniteLoss, CheckpointFailed) as e:
        fail(str(e), code=1)

    # -- report --------------------------------------------------------------------------------
    windows = summary.get("logged_windows") or []
    if windows and multihost.is_primary():  # one report per run, not one per process
        print(f"{loss_report(windows)}; wall {summary['wall_s']:.0f}s", flush=True)


def loss_report(windows) -> str:
    """The mean loss of this run's first log window against its last, each with its steps
    (after a resume, or at a last step off the log grid, the two windows differ in length)."""
    (a0, b0, l0), (a1, b1, l1) = windows[0], windows[-1]
    first = f"mean loss {l0:.4f} (steps {a0}-{b0})"
    return first if len(windows) == 1 else f"{first} -> {l1:.4f} (steps {a1}-{b1})"


if __name__ == "__main__":
    startup.start()  # before jax allocates: see posjax/startup.py
    app.run(main, flags_parser=parse_flags)
