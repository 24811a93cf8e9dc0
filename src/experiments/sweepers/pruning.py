"""Pruning for `hydra/sweeper=optuna_resumable` (`hydra.sweeper.pruner=median|hyperband|
wilcoxon|none`, docs/sweeps.md#pruning): a trial that is plainly worse than the others after
an evaluation stops there, recorded `pruned`.

The settings are checked here, at the login, before the search starts; what a trial does with
them (open its trial, report each evaluation, ask the pruner) is run/search_trial.py.
"""

from __future__ import annotations

import inspect
from typing import Any

from experiments.errors import ConfigError
from experiments.known_keys import nearest
from experiments.run.search_trial import PRUNERS, build_pruner, pruner_class
from experiments.validation import choice


def check(name: Any, kwargs: Any) -> tuple[str, dict[str, Any]]:
    """`hydra.sweeper.pruner` and `hydra.sweeper.pruner_kwargs`, checked against the pruner
    class's own signature (a wrong key is refused before the search starts)."""
    name = "none" if name is None else name
    choice(name, "hydra.sweeper.pruner", PRUNERS)
    kwargs = dict(kwargs or {})
    if name == "none":
        if kwargs:
            raise ConfigError(
                "hydra.sweeper.pruner_kwargs", kwargs, "{} with pruner=none (or set a pruner)"
            )
        return name, kwargs
    parameters = inspect.signature(pruner_class(name)).parameters
    for key, value in kwargs.items():
        if key not in parameters:
            hint = nearest(key, sorted(parameters), "hydra.sweeper.pruner_kwargs.", "valid: ")
            raise ConfigError(f"hydra.sweeper.pruner_kwargs.{key}", value, hint)
    try:
        build_pruner(name, kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError("hydra.sweeper.pruner_kwargs", kwargs, str(error)) from None
    return name, kwargs
