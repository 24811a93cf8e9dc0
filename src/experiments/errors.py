"""The one error type users see for a config that can never run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import Enum
from typing import Any, NoReturn


class ConfigError(Exception):
    """A bad key: names the key, the bad value and what would be valid.

    Raised before any process, queue slot or file exists, and printed as one line
    (no traceback) by the application, which then exits with status 2.
    """

    exit_code = 2

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key = key
        self.value = value
        self.expected = expected
        super().__init__(describe(key, value, expected))


# The value of a ConfigError whose value is not known (a key a yaml file sets that OmegaConf
# refused while merging it names no value): `invalid config: key: what is valid`.
NO_VALUE = object()


def describe(key: str, value: Any, expected: str) -> str:
    """`invalid config: key=value: what is valid`, the value as the user writes it (null and
    true/false, not None and True/False); a tool's flag (`--ema`) as the flag alone, or the
    flag and its value."""
    if key.startswith("--"):
        return f"{key}{'' if value is None else f' {value}'}: {expected}"
    if value is NO_VALUE:
        return f"invalid config: {key}: {expected}"
    return f"invalid config: {key}={_as_written(value)}: {expected}"


def _as_written(value: Any) -> str:
    """A value as a Hydra override spells it: null, true/false; strings quoted (so a space or
    an empty value shows); a typed choice (schemas/) as its name."""
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


class RunStopped(RuntimeError):
    """A run that cannot usefully go on (a family's health check said so mid-run): recorded
    `failed` with this message, printed as one line, exit status 1."""


class EvaluationError(RuntimeError):
    """A run cannot be evaluated as asked (e.g. none of its checkpoints is readable): not a
    config mistake, so `experiments-eval` prints it as one line and exits 1."""


def exit_in_one_line(command: Callable[[list[str]], int], evaluation_exit: int = 1) -> NoReturn:
    """A console command's main (experiments-eval, -sample, -export): its own exit status, or
    a ConfigError as one line and exit 2, an EvaluationError as one line and
    `evaluation_exit`; never a traceback for either."""
    try:
        status = command(sys.argv[1:])
    except (ConfigError, EvaluationError) as error:
        print(f"error: {error}", file=sys.stderr)
        status = ConfigError.exit_code if isinstance(error, ConfigError) else evaluation_exit
    sys.exit(status)
