"""What will run: model x data x topology x launcher -> family plan (engine, mesh, library
config, command).

`build_plan` is the single place a composed config is checked. It runs before Hydra makes the
run directory (see callbacks.py), so a config that can never run costs no process, queue slot
or file. Every failure is a ConfigError naming the key, the bad value and a valid choice. The
keys all families share are checked here; the family's own planner (experiments/families.py
finds it: `snn/plan.py`, `gan/plan.py`) checks the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from experiments import families, loggers, schemas
from experiments.composition import _placeholder_root_for_dry_run, _resolve
from experiments.errors import ConfigError
from experiments.run import early_stopping
from experiments.run.recorded_config import check_against_record
from experiments.sweepers.search_config import check_direction, storage_warning


def _objectives(value: Any, family: Any) -> tuple[str, ...]:
    """`objective`: what the run returns to a sweep (auto: the family's objective), or a list
    of metrics for a multi-objective Optuna study."""
    if value in (None, "auto"):
        return (family.objective,)
    names = list(value) if isinstance(value, list | tuple) else [value]
    unknown = [name for name in names if name not in family.directions]
    if unknown or not names or len(set(names)) != len(names):
        raise ConfigError(
            "objective",
            value,
            "auto ("
            + family.objective
            + "), one of "
            + ", ".join(family.directions)
            + ", or a list of them, e.g. objective=[val_accuracy,energy_per_image_mj]"
            if family.other_objectives
            else f"auto or {family.objective}",
        )
    return tuple(str(name) for name in names)


def objective_value(plan: Any, metrics: dict[str, Any]) -> Any:
    """What a run returns to its sweep: its objective's value, or the values of its
    objectives (NaN where one was not measured: the sweep counts that run failed)."""
    values = [metrics.get(name, float("nan")) for name in plan.objectives]
    return values[0] if len(values) == 1 else values


def build_plan(
    cfg: DictConfig,
    run_dir: Path | str,
    overrides: list[str],
    choices: dict[str, str],
    check_record: bool = True,
) -> Any:
    """The family's plan (snn.plan.SNNPlan, gan.plan.GANPlan, ...): checked, not launched.
    `check_record=False` skips the comparison with the run directory's recorded config, and
    the search's settings: a sweep point's process or job, where Hydra has already rewritten
    that record with the point's own config and which composes without the command line's
    hydra.sweeper overrides (the sweep's login checked both, with the sweep's own sweeper,
    before the first point started)."""
    cfg = _placeholder_root_for_dry_run(cfg)
    values = _resolve(cfg)
    run_dir = Path(run_dir)
    schemas.check(cfg, values, choices)  # each typed node's ranges and rules (schemas/)
    loggers.validate(values.get("logger"))
    if check_record and values.get("resume") is not None:
        families.refuse_retired_engine(run_dir)
    extensions = check_against_record(cfg, run_dir, values.get("resume")) if check_record else []
    family = families.for_model(values["model"])
    objectives = _objectives(values.get("objective", "auto"), family)
    plan = family.plan(cfg, values, run_dir, overrides, choices, extensions)
    plan.objective, plan.objectives = objectives[0], objectives
    if check_record:
        check_direction(cfg, objectives, family.directions)
        warning = storage_warning(cfg)
        if warning is not None and hasattr(plan, "launch_notes"):
            plan.launch_notes.append(warning)
    return early_stopping.attach(plan, values["trainer"], family)
