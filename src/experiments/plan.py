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

from experiments import families, loggers
from experiments import validation as check
from experiments.composition import _placeholder_root_for_dry_run, _resolve
from experiments.known_keys import check_known_keys
from experiments.run import early_stopping
from experiments.run.recorded_config import check_against_record
from experiments.sweepers.search_config import check_direction, search_pruner


def build_plan(
    cfg: DictConfig,
    run_dir: Path | str,
    overrides: list[str],
    choices: dict[str, str],
    check_record: bool = True,
) -> Any:
    """The family's plan (snn.plan.SNNPlan, gan.plan.GANPlan, ...): checked, not launched.
    `check_record=False` skips the comparison with the run directory's recorded config: a
    sweep point's process, where Hydra has already rewritten that record with the point's
    own config (the sweep's login compared them before the first point started)."""
    cfg = _placeholder_root_for_dry_run(cfg)
    values = _resolve(cfg)
    run_dir = Path(run_dir)
    check_known_keys(values, choices)
    loggers.validate(values.get("logger"))
    check.integer(values["seed"], "seed", minimum=0)
    check.choice(values["dry_run"], "dry_run", (False, True, "json"))
    if check_record and values.get("resume") is not None:
        families.refuse_retired_engine(run_dir)
    extensions = check_against_record(cfg, run_dir, values.get("resume")) if check_record else []
    family = families.for_model(values["model"])
    plan = family.plan(cfg, values, run_dir, overrides, choices, extensions)
    check_direction(cfg, family.objective, family.higher_is_better)
    early_stopping.check_pruned_trial(search_pruner(cfg), plan.engine, family)
    return early_stopping.attach(plan, values["trainer"], family)
