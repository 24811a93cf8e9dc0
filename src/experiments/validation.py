"""Small checks that name the key, the bad value and what would be valid."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from experiments.errors import ConfigError
from experiments.known_keys import nearest


def integer(value: Any, key: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(key, value, _range("an integer", minimum, maximum))
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ConfigError(key, value, _range("an integer", minimum, maximum))
    return value


def optional_integer(value: Any, key: str, minimum: int) -> int | None:
    return None if value is None else integer(value, key, minimum)


def positive_number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(key, value, "a number > 0, e.g. 1e-3")
    return float(value)


def non_negative_number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(key, value, "a number >= 0")
    return float(value)


def boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "true or false")
    return value


def choice(value: Any, key: str, choices: Iterable[Any]) -> Any:
    options = list(choices)
    if value not in options:
        raise ConfigError(key, value, "one of " + ", ".join(map(str, options)))
    return value


def _range(kind: str, minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{kind} from {minimum} to {maximum}"
    if minimum is not None:
        return f"{kind} >= {minimum}"
    return kind


def arguments(cls: type, kwargs: dict[str, Any], prefix: str, skip: int) -> None:
    """The class's own signature decides: an argument it does not take, or a required one
    that is missing, is refused before launch (not a TypeError once the run exists).
    `skip` leading parameters (the optimizer's params, the scheduler's optimizer) are ours."""
    call_arguments(cls.__init__, kwargs, prefix, 1 + skip, cls.__name__)


def call_arguments(
    function: Any, kwargs: dict[str, Any], prefix: str, skip: int, name: str | None = None
) -> None:
    """As `arguments`, for any callable (a loss function): its first `skip` parameters are
    the caller's."""
    name = name or getattr(function, "__name__", str(function))
    parameters = list(inspect.signature(function).parameters.values())[skip:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    names = [p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    for key, value in kwargs.items():
        if key not in names:
            hint = nearest(key, names, prefix, "it takes ")
            raise ConfigError(f"{prefix}{key}", value, f"not an argument of {name}; {hint}")
    for parameter in parameters:
        if parameter.default is inspect.Parameter.empty and parameter.name not in kwargs:
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            raise ConfigError(
                f"{prefix}{parameter.name}",
                None,
                f"required by {name}; set +{prefix}{parameter.name}=<value>",
            )
