"""The search's sampler (`hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|nsgaiii|gp`,
conf/hydra/sweeper/sampler/), checked before the search starts and then built.

Each option's config states every argument it sets, at the installed Optuna's defaults. A
sampler the installed Optuna lacks (`optuna.samplers.MOTPESampler`, gone since Optuna 4), a
misspelt argument, a library a sampler needs that is not installed, or a sampler that cannot
search this study's objectives is refused in one line before anything starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any

from experiments.errors import ConfigError
from experiments.known_keys import nearest

SAMPLERS = {
    "tpe": "optuna.samplers.TPESampler",
    "random": "optuna.samplers.RandomSampler",
    "grid": "optuna.samplers.GridSampler",
    "cmaes": "optuna.samplers.CmaEsSampler",
    "nsgaii": "optuna.samplers.NSGAIISampler",
    "nsgaiii": "optuna.samplers.NSGAIIISampler",
    "gp": "optuna.samplers.GPSampler",
}
ONE_OBJECTIVE = ("cmaes",)  # Optuna's CmaEsSampler refuses a multi-objective study
NEEDS = {"cmaes": ("cmaes", "pip install cmaes"), "gp": ("scipy", "pip install scipy")}
KEY = "hydra.sweeper.sampler"


def options() -> str:
    return ", ".join(f"hydra/sweeper/sampler={name}" for name in SAMPLERS)


def check(sampler: dict[str, Any], n_objectives: int) -> str:
    """The sampler's config (its `_target_` and arguments) against the installed Optuna;
    returns the option's name (tpe, grid, ...; the class name for a sampler of one's own)."""
    target = sampler.get("_target_")
    cls = _resolve(target)
    if cls is None:
        import optuna

        raise ConfigError(
            f"{KEY}._target_",
            target,
            f"not in the installed Optuna {optuna.__version__}: one of {options()}",
        )
    name = next((n for n, path in SAMPLERS.items() if path == target), cls.__name__)
    parameters = inspect.signature(cls.__init__).parameters
    for key, value in sampler.items():
        if key.startswith("_"):
            continue
        if key not in parameters or key in ("self", "search_space"):
            valid = sorted(p for p in parameters if p not in ("self", "search_space"))
            raise ConfigError(f"{KEY}.{key}", value, nearest(key, valid, f"{KEY}.", "valid: "))
    if name in NEEDS:
        module, install = NEEDS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                "hydra/sweeper/sampler", name, f"{install} first (Optuna's {cls.__name__} needs it)"
            )
    if name in ONE_OBJECTIVE and n_objectives > 1:
        raise ConfigError(
            "hydra/sweeper/sampler",
            name,
            f"tpe, nsgaii, nsgaiii, gp or random: Optuna's {cls.__name__} searches one "
            f"objective and this study has {n_objectives}",
        )
    return name


def build(sampler: dict[str, Any], grid: dict[str, list[Any]] | None = None) -> Any:
    """The sampler object (a grid sampler over `grid`, the search's points)."""
    from hydra.utils import instantiate

    if grid is not None:
        return instantiate(sampler, search_space=grid)
    return instantiate(sampler)


def _resolve(target: Any) -> Any:
    if not isinstance(target, str) or "." not in target:
        return None
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return cls if inspect.isclass(cls) else None
