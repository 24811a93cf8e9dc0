"""The one error type users see for a config that can never run."""

from __future__ import annotations

from typing import Any


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
        super().__init__(f"invalid config: {key}={value!r}: {expected}")


class EvaluationError(RuntimeError):
    """A run cannot be evaluated as asked (e.g. none of its checkpoints is readable): not a
    config mistake, so `experiments-eval` prints it as one line and exits 1."""
