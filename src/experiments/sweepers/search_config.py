"""What a trial's plan reads of the Optuna search it is a point of.

Every point of a search is planned at the login, with the composed Hydra config
(callbacks.py), before the search opens its study or launches a trial: a search whose trials
could never serve it is refused there, in one line, rather than after hours of trials.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from experiments.errors import ConfigError


def _is_optuna(cfg: Any) -> bool:
    target = OmegaConf.select(cfg, "hydra.sweeper._target_", default=None) or ""
    return "optuna" in str(target)


def search_pruner(cfg: Any) -> str | None:
    """The pruner of the search (None: not a pruned search)."""
    name = OmegaConf.select(cfg, "hydra.sweeper.pruner", default=None)
    return None if name in (None, "none") else str(name)


def check_direction(cfg: Any, objective: str, higher_is_better: bool) -> None:
    """An Optuna search optimises what its trials return, the family's objective:
    hydra-optuna-sweeper's default direction (minimize) would search for the worst
    val_accuracy. One direction, the objective's."""
    if not _is_optuna(cfg):
        return
    direction = OmegaConf.select(cfg, "hydra.sweeper.direction", default=None)
    wanted = "maximize" if higher_is_better else "minimize"
    name = getattr(direction, "name", direction)  # hydra-optuna-sweeper's Direction enum
    if name != wanted:
        shown = OmegaConf.to_container(direction) if OmegaConf.is_config(direction) else name
        better = "higher" if higher_is_better else "lower"
        raise ConfigError(
            "hydra.sweeper.direction",
            shown,
            f"{wanted}: each trial returns its {objective} ({better} is better)",
        )
