"""Hydra's and OmegaConf's composition errors as our one-line refusals.

Composing the run config fails before any check of ours runs when a key is misspelt
(`trainer.epoch=3`), a typed key gets a value of the wrong type (`trainer.epochs=abc`: the
schemas in schemas/) or a group has no such option (`model=sew_resnet19`). Hydra reports
each in several lines that advise `+trainer.epoch=3` (which our key check then refuses) and
exits 1. Here each becomes the ConfigError a check of ours raises: one line naming the key,
the value and what would be valid (the nearest key, the type the schema asks for, the
group's options), exit 2.

Hydra prints a composition error itself, inside its entry point, unless HYDRA_FULL_ERROR is
set: `reported_in_one_line` sets it until the config is composed (callbacks.py then calls
`composed()`), so the error reaches experiments-train's `main` instead; from then on a run's
own failure is reported by Hydra as before.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
import traceback
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hydra.core.override_parser.types import Override
from hydra.errors import CompactHydraException, OverrideParseException
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

from experiments.errors import NO_VALUE, ConfigError
from experiments.known_keys import GROUPS, nearest, where
from experiments.validation import in_words

FULL_ERROR = "HYDRA_FULL_ERROR"
CONFIG_MODULE = "experiments.conf"  # where experiments-train's configs are (train.py)
# Groups chosen by name on the command line that leave no node in the config.
PRESET_GROUPS = ("experiment", "hparams_search")
# Groups whose keys are the arguments of what their option names (a class, a builder): a
# key the yaml does not set is added with `+` and checked against that signature.
OPEN_GROUPS = ("model", "data", "optimizer")
# What Hydra can raise while it composes: its own errors (composition, a missing option, an
# override it cannot parse), which it prints as their message, and OmegaConf's
COMPOSITION_ERRORS = (CompactHydraException, OmegaConfBaseException)

# Whether this process set HYDRA_FULL_ERROR (and must take it back), and whether Hydra has
# composed the config (from then on its errors are a run's, reported by Hydra).
_state = {"ours": False, "composed": False}


def refusal(
    error: Exception, overrides: list[str], choices: Callable[[], dict[str, Any]]
) -> ConfigError | None:
    """The ConfigError that says what `error` (raised while composing with `overrides`)
    means; None when it is none of the mistakes above. `choices` gives the groups' chosen
    options (asked only for a misspelt key: "not a key of trainer=default")."""
    missing_file = getattr(error, "missing_cfg_file", None)
    if missing_file and getattr(error, "options", None) is not None:
        return _no_such_option(missing_file, list(error.options))  # type: ignore[attr-defined]
    cause = _omegaconf_cause(error)
    if cause is None or not getattr(cause, "full_key", None):
        return None
    key = str(cause.full_key)
    given = _override_of(overrides, key)
    if given is not None:  # a command line's override
        shown, value, in_file = given.key_or_group, _value(given), ""
    else:  # a value of a yaml file (Hydra: "In 'experiment/mine': ..."): OmegaConf's
        shown, value = key, cause.value
        found = re.match(r"In '([^']+)':", str(error))
        in_file = f" (in {found.group(1)}.yaml)" if found else ""
    if isinstance(cause, ConfigKeyError | ConfigAttributeError):
        shown_value = NO_VALUE if in_file else value  # (a key it has no value for)
        return _unknown_key(key, shown, shown_value, cause.parent_node, choices, in_file)
    if isinstance(cause, ValidationError):
        return ConfigError(shown, value, _expected(cause) + in_file)
    return None


def one_line(error: Exception) -> str:
    """Hydra's or OmegaConf's message on one line, without OmegaConf's node details; an
    override Hydra cannot parse named first (Hydra's message does not name it)."""
    lines = [line.strip() for line in str(error).splitlines()]
    kept = " ".join(line for line in lines if line and not line.startswith(_DETAILS))
    if isinstance(error, OverrideParseException) and error.override:
        return f"cannot parse the override {error.override!r}: {kept}"
    return kept


_DETAILS = ("full_key:", "object_type=", "reference_type=", "Config search path", "provider=")


def _omegaconf_cause(error: BaseException) -> OmegaConfBaseException | None:
    """The OmegaConf error under Hydra's (raised from it, or while handling it)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OmegaConfBaseException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _override_of(overrides: list[str], key: str) -> Override | None:
    """The command line's override of `key`, or of a key below it (`logger.csv.dir=x` when
    `logger.csv` does not exist)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException:
        return None
    for override in parsed:
        if override.is_delete():
            continue
        if override.key_or_group == key or override.key_or_group.startswith(f"{key}."):
            return override
    return None


def _value(override: Override) -> Any:
    """The value as the command line gives it: `trainer.epoch=3` is 3, a sweep its text."""
    if override.is_sweep_override():
        return override.input_line.partition("=")[2] if override.input_line else None
    return override.value()


def _unknown_key(
    key: str,
    shown: str,
    value: Any,
    parent: Any,
    choices: Callable[[], dict[str, Any]],
    in_file: str = "",
) -> ConfigError:
    """A key no schema or option of ours defines (`shown`: the override that reached for
    it; `in_file`: the yaml file that sets it), with the nearest one that exists."""
    prefix, _, name = key.rpartition(".")
    known = sorted(str(k) for k in (parent.keys() if parent is not None else []) if k != "hydra")
    if not prefix:  # the run config's top level: its keys and the config groups
        close = nearest(name, sorted({*known, *GROUPS, *PRESET_GROUPS}), "", "valid keys: ")
        group = close.removeprefix("did you mean ").removesuffix("?")
        if group in GROUPS or group in PRESET_GROUPS:
            return ConfigError(shown, value, f"not a config group; {close}{in_file}")
        return ConfigError(shown, value, f"not a key of the run config; {close}{in_file}")
    what = "not a key" if shown == key else f"{key} is not a key"
    close = nearest(name, known, f"{prefix}.", "valid keys: ")
    expected = f"{what} of {where(prefix, choices())}; {close}{in_file}"
    if prefix in OPEN_GROUPS:  # keys the class or builder takes beyond the yaml's: with +
        expected += f"; or add an argument the option does not set: +{shown}=..."
    return ConfigError(shown, value, expected)


def _no_such_option(missing_file: str, options: list[str]) -> ConfigError:
    """`model=sew_resnet19`: the group's nearest option, else all of them."""
    group, _, option = missing_file.rpartition("/")
    close = difflib.get_close_matches(option, options, n=1)
    hint = f"did you mean {group}={close[0]}?" if close else "one of " + ", ".join(options)
    return ConfigError(group, option, f"not an option of {group}; {hint}")


def _expected(cause: ValidationError) -> str:
    """What the schema's field takes, in words (`an integer`, `one of auto, max, min`)."""
    schema, field = cause.object_type, str(cause.full_key).rpartition(".")[2]
    if dataclasses.is_dataclass(schema):
        hint = typing.get_type_hints(schema).get(field)
        if hint is not None:
            return in_words(hint)
    return one_line(cause)


# ---------------------------------------------------------------- experiments-train's main


def _command_line_overrides(argv: list[str]) -> list[str]:
    """The overrides among Hydra's arguments (the words with `=` that are not flags)."""
    return [word for word in argv if "=" in word and not word.startswith("-")]


def choices_of(config_name: str, overrides: list[str]) -> Callable[[], dict[str, Any]]:
    """The groups' chosen options, from Hydra's defaults list (the composition that failed
    got that far: the defaults list comes before the overrides of keys). Outside an
    initialised Hydra (experiments-train's main, after Hydra's entry point) the package's
    own configs are read."""

    def choices() -> dict[str, Any]:
        from hydra import initialize_config_module
        from hydra.core.global_hydra import GlobalHydra

        try:
            if GlobalHydra.instance().is_initialized():
                return _known_choices(config_name, overrides)
            with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
                return _known_choices(config_name, overrides)
        except Exception:  # e.g. an option only a --config-dir has: the group alone
            return {}

    return choices


def _known_choices(config_name: str, overrides: list[str]) -> dict[str, Any]:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    loader = GlobalHydra.instance().config_loader()
    found = loader.compute_defaults_list(config_name, overrides, RunMode.RUN)
    return dict(found.overrides.known_choices)


@contextmanager
def reported_in_one_line(argv: list[str], config_name: str) -> Iterator[None]:
    """Around Hydra's entry point: a composition error is one line (`refusal`, else Hydra's
    message on one line) and exit 2; anything else raised before the config is composed is
    reported as Hydra reports it (a traceback, exit 1)."""
    _state["ours"] = FULL_ERROR not in os.environ
    _state["composed"] = False
    if _state["ours"]:
        os.environ[FULL_ERROR] = "1"
    try:
        yield
    except COMPOSITION_ERRORS as error:
        if _state["composed"]:
            raise
        overrides = _command_line_overrides(argv)
        refused = refusal(error, overrides, choices_of(config_name, overrides))
        print(f"error: {refused if refused is not None else one_line(error)}", file=sys.stderr)
        sys.exit(ConfigError.exit_code)
    except Exception:
        if _state["composed"] or not _state["ours"]:
            raise
        traceback.print_exc()  # what Hydra prints for an error outside a job
        sys.exit(1)
    finally:
        composed()


def composed() -> None:
    """The config is composed: Hydra reports what follows itself again (a run's failure)."""
    _state["composed"] = True
    if _state["ours"]:
        os.environ.pop(FULL_ERROR, None)
        _state["ours"] = False


@contextmanager
def refused_as_config_errors(overrides: list[str], choices: Callable[[], Any]) -> Iterator[None]:
    """Around a composition of ours (a sweep point's, the tests'): a composition error
    raised as the ConfigError `refusal` makes of it (others as they are)."""
    try:
        yield
    except COMPOSITION_ERRORS as error:
        refused = refusal(error, overrides, choices)
        if refused is None:
            raise
        raise refused from None
