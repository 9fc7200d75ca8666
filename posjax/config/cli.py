"""What the entry points (train.py, eval.py) share: bad input is ONE line on stderr and exit 2.

absl wraps whatever a config file raises while flags are parsed, so the ConfigError a user
needs to see may sit several exceptions deep; `config_error` digs it out.
"""

from __future__ import annotations

import difflib
import glob
import importlib.util
import os
import pkgutil
import sys
from importlib import metadata
from typing import Optional

from absl import flags
from ml_collections import config_flags

from posjax.config import overrides as overrides_lib
from posjax.errors import ConfigError


# PCI vendor id of Google's TPU chips (what jax's own hardware check looks for).
_GOOGLE_PCI_VENDOR = "0x1ae0"


def _has_tpu_chip() -> bool:
    for path in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(path) as f:
                if f.read().strip() == _GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def _has_accelerator_plugin() -> bool:
    """A jax PJRT plugin (CUDA, ROCm, ...) is installed: jax may pick it, leave jax alone."""
    if metadata.entry_points(group="jax_plugins"):
        return True
    # jax_plugins: the namespace package the CUDA / ROCm plugins install into (found, not run)
    spec = importlib.util.find_spec("jax_plugins")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(True for _ in pkgutil.iter_modules(spec.submodule_search_locations))


def quiet_platforms(environ=os.environ) -> Optional[str]:
    """On a machine without TPU chips, keep jax from starting libtpu (installed for compiling
    kernels for a described TPU: requirements-tpu.txt), whose failed start-up prints alarming
    errors on every CPU run. Sets JAX_PLATFORMS=cpu only when the user did not set it, libtpu
    is installed, no TPU chip is on the PCI bus and no other accelerator plugin is installed,
    i.e. when CPU is what jax would end up using anyway. Call before jax starts a backend.
    Returns the value set, or None when nothing was changed."""
    if environ.get("JAX_PLATFORMS") or "JAX_FORCE_TPU_INIT" in environ:
        return None
    if importlib.util.find_spec("libtpu") is None or _has_tpu_chip() or _has_accelerator_plugin():
        return None
    environ["JAX_PLATFORMS"] = "cpu"
    if "jax" in sys.modules:  # imported already: its config read the environment before
        sys.modules["jax"].config.update("jax_platforms", "cpu")
    return "cpu"


def fail(message, code: int = 2, *, now: bool = False) -> None:
    """Print `<program>: error: <message>` as one line on stderr and exit with `code`.
    now: end with os._exit (no interpreter teardown), for a process with a thread blocked
    where Python cannot stop it (see signals.Interrupted.exit_now)."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "posjax"
    sys.stderr.write(f"{program}: error: {' '.join(str(message).split())}\n")
    sys.stderr.flush()
    if now:
        sys.stdout.flush()
        os._exit(code)
    sys.exit(code)


def config_error(exc: Optional[BaseException]) -> Optional[ConfigError]:
    """The ConfigError inside `exc` (its cause/context chain), if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ConfigError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def parse_flags(argv):
    """absl's flag parser, but every bad --config input is one line and exit 2: an unknown
    variant, a missing file, a ConfigError raised by get_config, and every --config.* override
    (posjax.config.overrides checks and applies those; config_flags would end an unknown key with an
    AttributeError traceback)."""
    quiet_platforms()  # before a config file imports jax
    try:
        argv = flags.FLAGS.read_flags_from_files(argv, force_gnu=False)  # --flagfile=...
    except flags.Error as e:
        fail(e)
    argv, overrides = overrides_lib.split_argv(argv)
    # config_flags scans sys.argv itself for overrides: show it the argv without them.
    saved_argv, sys.argv = sys.argv, list(argv)
    try:
        rest = flags.FLAGS(argv)
    except SystemExit as e:
        # absl ends --help with exit code 1; asking for help is not an error.
        if e.code == 1 and any(a.split("=")[0] in HELP_FLAGS for a in argv[1:]):
            sys.exit(0)
        raise
    except flags.Error as e:
        error = config_error(e)
        fail(error if error is not None else e)
    except ConfigError as e:
        fail(e)
    finally:
        sys.argv = saved_argv
    check_config_file()
    if overrides:
        apply_overrides(overrides)
    return rest


HELP_FLAGS = ("--help", "-help", "-?", "--helpshort", "--helpfull")


def check_config_file() -> None:
    """--config naming a file that does not exist: one line with the nearest config files
    (config_flags would report it only on first use, as a multi-line load failure)."""
    if "config" not in flags.FLAGS or not flags.FLAGS["config"].present:
        return
    path = config_flags.get_config_filename(flags.FLAGS["config"]).partition(":")[0]
    if not path or os.path.isfile(path):
        return
    fail(f"--config={path} is not allowed: an existing config file (no such file; "
         f"{nearest_configs(path)})")


def nearest_configs(path: str, n: int = 3) -> str:
    """'nearest: a.py, b.py' among the .py files of the folder `path` names (or, when that
    folder does not exist either, of configs/ and configs/experiments/)."""
    folder = os.path.dirname(path)
    folders = [folder] if os.path.isdir(folder or ".") else ["configs",
                                                             os.path.join("configs", "experiments")]
    candidates = [p for f in folders for p in sorted(glob.glob(os.path.join(f or ".", "*.py")))
                  if not os.path.basename(p).startswith("__")]
    close = difflib.get_close_matches(os.path.normpath(path), candidates, n=n, cutoff=0.0)
    return ("nearest: " + ", ".join(close)) if close else "no config files there"


def apply_overrides(overrides) -> None:
    """Apply the --config.* overrides to FLAGS.config (loading it first); one line on error."""
    if "config" not in flags.FLAGS or flags.FLAGS.config is None:
        fail(f"{overrides[0].flag} needs a config file: --config=FILE")
    try:
        config = flags.FLAGS.config
        config.keys()  # config_flags reports a file that failed to load only on first use
        overrides_lib.apply(config, overrides)
    except ConfigError as e:
        fail(e)
    except OSError as e:
        error = config_error(e)
        fail(error if error is not None else e)
