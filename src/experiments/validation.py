"""Small checks that name the key, the bad value and what would be valid."""

from __future__ import annotations

import enum
import inspect
import typing
from collections.abc import Iterable
from pathlib import Path
from types import NoneType, UnionType
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


def in_words(hint: Any) -> str:
    """A type annotation as a refusal says what is valid (`an integer, or null`)."""
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = [in_words(arg) for arg in typing.get_args(hint) if arg is not NoneType]
        return " or ".join(kinds) + (", or null" if NoneType in typing.get_args(hint) else "")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(member.name for member in hint)
    origin = typing.get_origin(hint) or hint
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if origin in words:
        return words[origin]
    if origin is list:
        return "a list, e.g. [a, b]"
    if origin is dict:
        return "a mapping, e.g. {key: value}"
    if origin is Path:
        return "a path"
    return f"a {getattr(hint, '__name__', hint)}"


def of_type(value: Any, hint: Any) -> bool:
    """Whether a config value fits a parameter's annotation, as a yaml or an override gives
    it (a path is a string; a number may be an integer; true is not an integer). An
    annotation it cannot judge (Any, a class of its own) fits anything."""
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        return any(of_type(value, arg) for arg in typing.get_args(hint))
    if hint is NoneType:
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):
        numbers = (int,) if hint is int else (int, float)
        return isinstance(value, numbers) and not isinstance(value, bool)
    if hint in (str, Path):
        return isinstance(value, str)
    return True
