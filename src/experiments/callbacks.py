"""Hydra callback that validates the composed config before Hydra writes anything.

Hydra creates the run directory (and `.hydra/`) inside `run_job`, after `on_run_start`.
Validating here means a bad config, or a dry run, leaves no directory behind.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments import distributed_env
from experiments.errors import ConfigError
from experiments.run.record import COMMAND_ENV, user_command

# Set once Hydra composed the config: an exit status 1 before that is a composition error.
composed = False
# The plan on_run_start built for a single run; the task function reuses it instead of
# validating (and building the model on the meta device) a second time.
planned: Any = None


def print_config_error(error: ConfigError) -> None:
    print(f"error: {error}", file=sys.stderr)


def sweep_points(config: DictConfig) -> list[list[str]] | None:
    """The override lists of every point of a basic-sweeper sweep, expanded as the sweeper
    will expand them; None for other sweepers (they choose points while they run)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = config.hydra.sweeper
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    return [point for batch in BasicSweeper.split_arguments(parsed, None) for point in batch]


class ExperimentsCallback(Callback):
    """Checks every run and sweep point before launch; keeps the sweep report current."""

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        """Keep the sweep report current as points finish (also on Slurm nodes)."""
        if (
            config.hydra.mode == RunMode.MULTIRUN
            and not distributed_env.is_worker()
            and distributed_env.rank() == 0  # one writer among a Slurm job's tasks
        ):
            from experiments.report import write_report

            try:
                write_report(Path(config.hydra.sweep.dir))
            except Exception as error:  # a report must never turn a finished point into a failure
                logging.getLogger(__name__).warning("sweep report not updated: %s", error)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from experiments.report import format_outcome, write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        outcome = write_report(sweep_dir)
        print(format_outcome(sweep_dir, outcome))
        if outcome["failed"]:
            sys.exit(1)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Check every point of the sweep before the first one starts or is queued."""
        global composed
        composed = True
        import json

        from hydra import compose

        from experiments.plan import build_plan

        # The command the user typed, recorded by every point (Slurm jobs inherit it).
        os.environ.setdefault(COMMAND_ENV, user_command())
        points = sweep_points(config)
        if points is None:  # e.g. Optuna: it picks points while it runs
            if config.dry_run:
                print(
                    "dry run: this sweeper chooses its points while it runs; the plan "
                    "of the base config follows (each trial overrides its parameters)."
                )
                cfg = compose(
                    config.hydra.job.config_name,
                    list(config.hydra.overrides.task),
                    return_hydra_config=True,
                )
                run_dir = Path(config.hydra.sweep.dir).absolute() / "0"
                plan = build_plan(cfg, run_dir, [], dict(cfg.hydra.runtime.choices))
                print(
                    json.dumps(plan.as_dict(), indent=2)
                    if config.dry_run == "json"
                    else plan.as_text()
                )
                sys.exit(0)
            return
        plans = []
        for number, overrides in enumerate(points):
            run_dir = Path(config.hydra.sweep.dir).absolute() / str(number)
            try:
                cfg = compose(config.hydra.job.config_name, overrides, return_hydra_config=True)
                plans.append(build_plan(cfg, run_dir, overrides, dict(cfg.hydra.runtime.choices)))
            except ConfigError as error:
                print(
                    f"error: sweep point {number} ({' '.join(overrides)}): {error}", file=sys.stderr
                )
                sys.exit(ConfigError.exit_code)
        if config.dry_run == "json":
            # A plain command (launcher=slurm runs as a one-point sweep) prints one plan.
            swept = "-m" in sys.argv or "--multirun" in sys.argv or len(plans) > 1
            output = [plan.as_dict() for plan in plans] if swept else plans[0].as_dict()
            print(json.dumps(output, indent=2))
            sys.exit(0)
        if config.dry_run:
            for number, plan in enumerate(plans):
                print(f"--- sweep point {number}: {' '.join(points[number])}")
                print(plan.as_text())
            sys.exit(0)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        global composed, planned
        composed = True
        from experiments.plan import build_plan

        HydraConfig.instance().set_config(config)  # lets ${hydra:...} resolve this early
        hydra = config.hydra
        try:
            plan = build_plan(
                config,
                Path(hydra.run.dir).absolute(),
                list(hydra.overrides.task),
                dict(hydra.runtime.choices),
            )
        except ConfigError as error:
            print_config_error(error)
            sys.exit(ConfigError.exit_code)
        planned = plan
        if distributed_env.is_worker():
            return  # the launching process already printed the plan / wrote .hydra
        if config.dry_run == "json":
            import json

            print(json.dumps(plan.as_dict(), indent=2))
            sys.exit(0)
        if config.dry_run:
            print(plan.as_text())
            sys.exit(0)
