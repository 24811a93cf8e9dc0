"""What a trial's plan reads of the Optuna search it is a point of.

Every point of a search is planned at the login, with the composed Hydra config
(callbacks.py), before the search opens its study or launches a trial: a search whose trials
could never serve it is refused there, in one line, rather than after hours of trials.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from experiments import study_storage
from experiments.errors import ConfigError


def _is_optuna(cfg: Any) -> bool:
    target = OmegaConf.select(cfg, "hydra.sweeper._target_", default=None) or ""
    return "optuna" in str(target)


def search_pruner(cfg: Any) -> str | None:
    """The pruner of the search (None: not a pruned search)."""
    name = OmegaConf.select(cfg, "hydra.sweeper.pruner", default=None)
    return None if name in (None, "none") else str(name)


def check_direction(cfg: Any, objectives: tuple[str, ...], directions: dict[str, bool]) -> None:
    """An Optuna search optimises what its trials return, the run's objective(s) (`objective`:
    the family's by default): the sweeper's default direction (minimize, as hydra-optuna-
    sweeper's was) would search for the worst val_accuracy. One direction per objective, each
    the objective's; a study of several objectives is Optuna's multi-objective study (its
    Pareto front), unpruned."""
    if not _is_optuna(cfg):
        return
    direction = OmegaConf.select(cfg, "hydra.sweeper.direction", default=None)
    given = OmegaConf.to_container(direction) if OmegaConf.is_config(direction) else direction
    names = [getattr(d, "name", d) for d in (given if isinstance(given, list) else [given])]
    wanted = ["maximize" if directions[o] else "minimize" for o in objectives]
    if names != wanted:
        said = ", ".join(
            f"its {o} ({'higher' if directions[o] else 'lower'} is better)" for o in objectives
        )
        valid = wanted[0] if len(wanted) == 1 else "[" + ",".join(wanted) + "]"
        shown = given if isinstance(given, list) else names[0]
        raise ConfigError("hydra.sweeper.direction", shown, f"{valid}: each trial returns {said}")
    if len(objectives) > 1 and search_pruner(cfg) is not None:
        raise ConfigError(
            "hydra.sweeper.pruner",
            search_pruner(cfg),
            f"none: a study of {len(objectives)} objectives ({', '.join(objectives)}) is "
            "Optuna's multi-objective study, which its pruners do not prune",
        )


def storage_warning(cfg: Any) -> str | None:
    """A pruned search on Slurm whose study is an SQLite file: every trial's job writes it
    from its node, where SQLite's locks are unreliable (the plan's launch note: one line at
    submission and in the dry run)."""
    if not _is_optuna(cfg) or search_pruner(cfg) is None:
        return None
    if OmegaConf.select(cfg, "launcher.name", default=None) != "slurm":
        return None
    storage = OmegaConf.select(
        cfg, "hydra.sweeper.storage", default=None, throw_on_resolution_failure=False
    )
    if study_storage.kind(storage) != "sqlite":
        return None
    return (
        f"warning: hydra.sweeper.storage={storage}: each pruned trial's Slurm job writes this "
        "SQLite file from its node, and SQLite's locks are unreliable on a shared (NFS) "
        'filesystem ("database is locked", or a damaged study); the default journal file '
        "(${hydra.sweep.dir}/optuna.journal) is safe there"
    )
