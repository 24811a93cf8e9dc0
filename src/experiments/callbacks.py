"""Hydra callback that validates the composed config before Hydra writes anything.

Hydra creates the run directory (and `.hydra/`) inside `run_job`, after `on_run_start`.
Validating here means a bad config, or a dry run, leaves no directory behind.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments import distributed_env
from experiments.errors import ConfigError


def print_config_error(error: ConfigError) -> None:
    print(f"error: {error}", file=sys.stderr)


class ValidateBeforeLaunch(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
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
        if distributed_env.is_worker():
            return  # the launching process already printed the plan / wrote .hydra
        if config.dry_run == "json":
            import json

            print(json.dumps(plan.as_dict(), indent=2))
            sys.exit(0)
        if config.dry_run:
            print(plan.as_text())
            sys.exit(0)
