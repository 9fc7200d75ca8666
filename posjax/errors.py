"""Error types shared by every layer of posjax.

A leaf module (imports nothing from posjax) so that `positions/` can raise these too.
Entry points catch `ConfigError` and print its message as one line with exit code 2.
"""


class ConfigError(ValueError):
    """A config field or an input has a value that posjax does not accept.

    The message names the field, the value that was given and what is allowed. It is
    raised before anything is compiled, never from inside jit.
    """

    def __init__(self, field: str, value, allowed: str):
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")


def check(condition: bool, field: str, value, allowed: str) -> None:
    """Raise ConfigError(field, value, allowed) unless `condition` holds."""
    if not condition:
        raise ConfigError(field, value, allowed)
