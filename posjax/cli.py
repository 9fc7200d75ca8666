"""What the entry points (train.py, eval.py) share: bad input is ONE line on stderr and exit 2.

absl wraps whatever a config file raises while flags are parsed, so the ConfigError a user
needs to see may sit several exceptions deep; `config_error` digs it out.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from absl import flags

from posjax.errors import ConfigError


def fail(message, code: int = 2) -> None:
    """Print `<program>: error: <message>` as one line on stderr and exit with `code`."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "posjax"
    sys.stderr.write(f"{program}: error: {' '.join(str(message).split())}\n")
    sys.stderr.flush()
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
    """absl's flag parser, but a bad --config (unknown variant, missing file, a ConfigError
    raised by get_config) is one line and exit 2 instead of a usage dump or a traceback."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        error = config_error(e)
        fail(error if error is not None else e)
    except ConfigError as e:
        fail(e)
