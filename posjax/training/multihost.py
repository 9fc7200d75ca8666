"""Multi-host runs: jax.distributed start-up, per-process data, global arrays, who writes.

One train.py, one config, N processes (one per TPU VM host or per GPU node/task). Each
process sees all devices in `jax.devices()` but can only touch its own (`jax.local_devices()`).
The rules that keep N processes in lockstep:

  * start-up: `initialize()` calls jax.distributed.initialize() when flags or the environment
    say there is more than one process (explicit --coordinator_address/--num_processes/
    --process_id; SLURM srun; Open MPI; JAX_COORDINATOR_ADDRESS; a Cloud TPU VM, where jax
    reads the pod's workers from the metadata server). It must run before anything touches a
    jax backend, so train.py calls it right after parsing flags.
  * data: the GLOBAL batch b of step s is the same rows whatever the process count: rows
    [s*B, (s+1)*B) of one seeded, per-epoch reshuffled order of all packed rows. Each process
    builds (tokenizes, masks) only the rows its devices hold: the contiguous slice
    `local_rows(mesh, B)` of every global batch. Its iterator state is {'next_index': s},
    the number of global batches consumed, so a checkpoint restores under any process count
    (and any mesh) as long as data.batch_size is unchanged; a different batch size is refused
    with a ConfigError naming both sizes (rows already seen could not be mapped exactly).
  * arrays: `to_global` turns the process-local rows into one global jax.Array per key with
    jax.make_array_from_process_local_data (no cross-host copy).
  * writes: only process 0 prints, writes TensorBoard, config.json and vocab.txt (the others
    wait at a barrier and read them); orbax coordinates checkpoint saves across processes
    itself (each process writes its own shards; process 0 writes metadata and the data item).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Optional

import jax
import numpy as np
from jax._src import clusters, distributed  # jax internals: see _cluster_params, StopAgreement
from jax.experimental import multihost_utils

from posjax import data
from posjax.errors import ConfigError, check
from posjax.training import sharding, signals

try:  # Cloud TPU VM: jax's own check (it asks the metadata server)
    from jax._src.clusters.cloud_tpu_cluster import running_in_cloud_tpu_vm
except ImportError:  # pragma: no cover - jax internals moved
    running_in_cloud_tpu_vm = False

log = logging.getLogger(__name__)


# -- start-up -------------------------------------------------------------------------------


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def detect_cluster() -> Optional[str]:
    """Name of the multi-process launcher found in the environment, or None (one process)."""
    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        return "env"
    if "SLURM_PROCID" in os.environ and (_env_int("SLURM_NTASKS") or 1) > 1:
        return "slurm"
    if (_env_int("OMPI_COMM_WORLD_SIZE") or 1) > 1:
        return "openmpi"
    if running_in_cloud_tpu_vm:  # Cloud TPU VM (pod slices and multi-slice)
        return "tpu"
    return None


DEFAULT_INIT_TIMEOUT_S = 300
# jax.distributed aborts the process (a C++ check failure) when ITS timeout passes; give it
# this much longer than ours, so the one-line error below always comes first.
_JAX_TIMEOUT_MARGIN_S = 60


class StartupTimeout(RuntimeError):
    """Not every process reached the coordinator within the start-up timeout."""


def initialize(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None, *, mode: Optional[bool] = None,
               timeout_s: int = DEFAULT_INIT_TIMEOUT_S, announce=None) -> bool:
    """Start jax.distributed if this is a multi-process run. Returns whether it did.

    mode: None = auto (explicit arguments, else the environment), True = always call
    jax.distributed.initialize() (jax finds the cluster), False = never (single process).
    Explicit arguments must come all three together.

    The wait for the other processes is announced with one line (`announce`, default print)
    and bounded by `timeout_s`: past it, StartupTimeout. jax waits in C++, deaf to signals, so
    it waits in a helper thread while this one stays in Python: a SIGTERM / SIGINT during the
    wait reaches the caller's handler (signals.Interrupted, marked `exit_now`: the helper
    thread cannot be stopped, so the process must end with os._exit after its message).
    """
    given = [coordinator_address is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ConfigError("coordinator_address/num_processes/process_id",
                          (coordinator_address, num_processes, process_id),
                          "all three flags together (or none: detected from the environment)")
    check(isinstance(timeout_s, int) and timeout_s >= 1, "init_timeout", timeout_s,
          "an int >= 1 (seconds to wait for every process)")
    if mode is False:
        return False
    if all(given):
        check(num_processes >= 1, "num_processes", num_processes, "a positive int")
        check(0 <= process_id < num_processes, "process_id", process_id,
              f"an int in [0, {num_processes}) (num_processes={num_processes})")
        kwargs = dict(coordinator_address=coordinator_address, num_processes=num_processes,
                      process_id=process_id)
    elif mode or detect_cluster() is not None:
        kwargs = {}
        if detect_cluster() == "env":
            kwargs = dict(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                          num_processes=_env_int("JAX_NUM_PROCESSES"),
                          process_id=_env_int("JAX_PROCESS_ID"))
    else:
        return False
    # CPU processes need a collectives library to talk to each other (tests, CPU clusters);
    # the setting only affects the CPU client, so it is harmless on GPU / TPU.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    _wait_for_cluster(kwargs, timeout_s, announce or (lambda line: print(line, flush=True)))
    log.info("jax.distributed: process %d of %d, %d local / %d global devices",
             jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count())
    return True


def _cluster_params(kwargs: dict, timeout_s: int) -> dict:
    """kwargs completed from the environment as jax.distributed would (SLURM, Open MPI, Cloud
    TPU metadata), so the wait can name the address and the process count."""
    address, count, pid, local_ids = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        kwargs.get("coordinator_address"), kwargs.get("num_processes"),
        kwargs.get("process_id"), None, None, timeout_s)
    if None in (address, count, pid):
        raise ConfigError("cluster", detect_cluster() or "--distributed",
                          "an environment jax.distributed can read the coordinator address, "
                          "process count and process id from (SLURM srun: SLURM_JOB_ID, "
                          "SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID; Open "
                          "MPI; a Cloud TPU VM) or --coordinator_address, --num_processes and "
                          "--process_id")
    out = dict(coordinator_address=address, num_processes=int(count), process_id=int(pid))
    if local_ids is not None:
        out["local_device_ids"] = local_ids
    return out


def _wait_for_cluster(kwargs: dict, timeout_s: int, announce) -> None:
    params = _cluster_params(kwargs, timeout_s)
    where = f"{params['num_processes']} processes at {params['coordinator_address']}"
    done, failure = threading.Event(), []

    def connect():
        try:
            jax.distributed.initialize(
                **params, initialization_timeout=timeout_s + _JAX_TIMEOUT_MARGIN_S)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            failure.append(e)
        finally:
            done.set()

    deadline = time.monotonic() + timeout_s
    # The announcement is what a launcher (or a user) reacts to, so a signal can come at any
    # point from here on, even before the thread is running: every Interrupted raised here
    # ends with os._exit. A normal exit would tear down the coordination service that the
    # thread may have started, and its C++ teardown logs about the abandoned wait.
    try:
        announce(f"process {params['process_id']}: waiting for {where} (timeout {timeout_s} s)")
        threading.Thread(target=connect, name="jax.distributed start-up", daemon=True).start()
        # Short waits: the signal handler runs between them even where a lock wait is not
        # interruptible.
        while not done.wait(min(0.5, max(deadline - time.monotonic(), 0.0))):
            if time.monotonic() >= deadline:
                raise StartupTimeout(
                    f"timed out after {timeout_s} s (--init_timeout) waiting for {where}; "
                    "start every process (the same coordinator address and process count, "
                    "each its own process id) or raise --init_timeout")
    except signals.Interrupted as e:
        e.exit_now = True
        raise
    if failure:
        raise failure[0]


def is_primary() -> bool:
    return jax.process_index() == 0


def sync(name: str) -> None:
    """Barrier across processes (no-op for one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


# -- which rows each process builds -----------------------------------------------------------


def local_rows(mesh, global_batch: int) -> tuple[int, int]:
    """[lo, hi): the rows of every global batch that this process's devices hold.

    A batch is split over ('data', 'fsdp') on its first axis; the devices of one process
    hold one contiguous block of rows (jax.devices() is process-major), or the whole batch
    when no batch axis crosses processes. Anything else (a hand-made device order) is refused.
    """
    sh = sharding.batch_sharding(mesh, 1)
    index_map = sh.addressable_devices_indices_map((global_batch,))
    spans = sorted({(s[0].start or 0, global_batch if s[0].stop is None else s[0].stop)
                    for s in index_map.values()})
    lo, hi = spans[0][0], spans[-1][1]
    covered = sum(b - a for a, b in spans)
    if covered != hi - lo:
        raise ConfigError("mesh", sharding.describe(mesh),
                          f"a device order where each process holds one contiguous block of the "
                          f"batch (process {jax.process_index()} holds {spans})")
    return lo, hi


def to_global(batch: dict, batch_sh: dict, global_batch: int) -> dict:
    """Process-local rows -> global jax.Arrays (one per key) with the given shardings."""
    if jax.process_count() == 1:
        return jax.device_put(batch, batch_sh)
    return {k: jax.make_array_from_process_local_data(
                batch_sh[k], np.asarray(v), (global_batch,) + tuple(np.shape(v)[1:]))
            for k, v in batch.items()}


# -- data: process-count invariant global batches ----------------------------------------------


def make_train_iterator(config: Any, tokenizer, seed: int, rows: tuple[int, int], *,
                        workdir: Optional[str] = None):
    """Iterator over this process's rows [lo, hi) of each global batch (batch contract).

    With rows = (0, B) (one process) it yields exactly the batches of
    posjax.data.make_train_iterator(config, tokenizer, seed); the data pipeline defines the
    global row order, this module only decides which slice each process feeds.
    """
    return data.make_train_iterator(config, tokenizer, seed, workdir=workdir, rows=rows)


def make_eval_batches(config: Any, tokenizer, num_batches: int, rows: tuple[int, int], *,
                      workdir: Optional[str] = None) -> list[dict]:
    """The fixed evaluation batches of a one-process run, cut to this process's rows (so the
    evaluation numbers do not depend on the process count either)."""
    lo, hi = rows
    return [{k: v[lo:hi] for k, v in b.items()}
            for b in data.make_eval_batches(config, tokenizer, num_batches, workdir=workdir)]


def data_item(iterator_state: dict, batch_size: int) -> dict:
    """What a checkpoint stores about the data position (JSON)."""
    return {"iterator": iterator_state, "global_batch_size": int(batch_size),
            "process_count": jax.process_count()}


def check_data_item(item: dict, batch_size: int) -> dict:
    """The iterator state to restore, or ConfigError when it cannot map to this run.

    The state counts GLOBAL batches, so a different process count maps exactly (every
    process re-derives its rows from it). A different global batch size would change which
    rows each step holds: refused, naming both sizes.
    """
    if not (isinstance(item, dict) and "iterator" in item):
        return item  # a bare iterator state (older checkpoints, converted workdirs): one process
    saved = item.get("global_batch_size")
    if saved is not None and int(saved) != int(batch_size):
        raise ConfigError(
            "data.batch_size", batch_size,
            f"{saved}, the global batch size of the checkpoint (saved by "
            f"{item.get('process_count', '?')} process(es); the data position counts global "
            f"batches, so the process count may change but the global batch may not)")
    return item["iterator"]


class NullLogger:
    """The Logger interface for processes other than 0: counts nothing, writes nothing."""

    def write(self, line: str) -> None:
        pass

    def step_done(self) -> None:
        pass

    def restart_window(self) -> None:
        pass

    def log_train(self, step: int, values: dict) -> dict:
        return dict(values)

    def log_eval(self, step: int, values: dict) -> None:
        pass

    def close(self) -> None:
        pass


# -- stopping together ------------------------------------------------------------------------

_AGREEMENTS = [0]  # train_and_evaluate calls in this process: keys of one call never meet another's


class StopAgreement:
    """SIGTERM / SIGINT in a multi-process run: every process stops after the SAME step and
    saves it (orbax saves and the final eval are collective: processes doing different things
    would hang).

    A signal may reach one process, or all of them at slightly different steps (each host's
    loop runs a step or two ahead of its devices). A process that got one posts its name in
    the jax.distributed key-value store; at every step boundary each process looks there (one
    coordinator round trip, no device sync). A process that sees a request, or reaches the
    last step, posts the step it is at once and waits for every other process's post; all of
    them then stop after the largest posted step (the others train on to it: nobody steps
    back), and all read the same signal name (each process posts the name before its step, so
    once every step is posted the name can no longer change). One process: the local flag.
    """

    TIMEOUT_MS = 30 * 60 * 1000  # a process may be compiling its first step (minutes on pods)

    def __init__(self, stopper):
        self.stopper = stopper
        self.stop_at: Optional[int] = None
        self._signal: Optional[str] = None
        _AGREEMENTS[0] += 1
        self.prefix = f"posjax_stop/{_AGREEMENTS[0]}/"
        self.client = None
        if jax.process_count() > 1:
            # The distributed runtime's client, as orbax reaches it (jax has no public name).
            self.client = distributed.global_state.client

    def _posted_signal(self) -> Optional[str]:
        return dict(self.client.key_value_dir_get(self.prefix)).get(self.prefix + "signal")

    def should_stop(self, step: int, last: bool) -> bool:
        """True when the loop must end after `step` (call at every step boundary; `last`:
        `step` is the run's final step). `stopping` then says whether it was a signal."""
        if self.client is None:
            return last or self.stopper.requested
        if self.stop_at is None:
            if self.stopper.requested:
                try:
                    self.client.key_value_set(self.prefix + "signal", self.stopper.signal_name)
                except Exception:  # noqa: BLE001 - another process posted first: same meaning
                    pass
            elif not last and self._posted_signal() is None:
                return False
            self.client.key_value_set(f"{self.prefix}step/{jax.process_index()}", str(step))
            self.stop_at = max(
                int(self.client.blocking_key_value_get(f"{self.prefix}step/{i}", self.TIMEOUT_MS))
                for i in range(jax.process_count()))
            self._signal = self._posted_signal()
        return step >= self.stop_at

    @property
    def signal_name(self) -> Optional[str]:
        """The signal that stopped the run (None: it ran to its last step). One process: a
        signal up to this moment counts, as it always did."""
        return self.stopper.signal_name if self.client is None else self._signal

    @property
    def stopping(self) -> bool:
        return self.signal_name is not None
