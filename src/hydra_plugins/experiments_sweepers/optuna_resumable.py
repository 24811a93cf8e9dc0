"""Our Optuna sweeper as a Hydra plugin: Hydra instantiates sweepers only from the
hydra_plugins namespace. The work is in experiments.sweepers.optuna, imported when a search
starts (Hydra imports this module at every start-up: it must stay cheap, so no Optuna here).

Its config keys are those hydra-optuna-sweeper had (sampler, direction, storage, study_name,
n_trials, n_jobs, params, custom_search_space), plus the pruner (experiments.sweepers.pruning):
`pruner: median|hyperband|wilcoxon|none` and `pruner_kwargs`, the pruner class's own arguments.
The sampler is a config group of its own, hydra/sweeper/sampler (conf/hydra/sweeper/sampler/).
"""

# No `from __future__ import annotations`: Hydra imports plugin modules outside sys.modules,
# where dataclasses cannot resolve string annotations (and OmegaConf reads the real ones).
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional  # noqa: UP035 (see above)

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import MISSING, DictConfig


@dataclass
class ResumableOptunaSweeperConf:
    _target_: str = "hydra_plugins.experiments_sweepers.optuna_resumable.ResumableOptunaSweeper"
    # The sampler's config reaches the sweeper as it is written (checked, then built there).
    _recursive_: bool = False
    sampler: Any = MISSING  # conf/hydra/sweeper/optuna_resumable.yaml's default: tpe
    # One direction per objective (minimize | maximize), checked against what the trials
    # return before the search starts (sweepers/search_config.py).
    direction: Any = "minimize"
    storage: Optional[str] = None  # noqa: UP045
    study_name: Optional[str] = None  # noqa: UP045
    n_trials: int = 20  # the study's total budget
    n_jobs: int = 2  # trials in flight at once
    params: Optional[Dict[str, str]] = None  # noqa: UP006, UP045
    # An import path of a function (config, trial) -> None that suggests more parameters.
    custom_search_space: Optional[str] = None  # noqa: UP045
    pruner: Optional[str] = "none"  # noqa: UP045
    pruner_kwargs: Dict[str, Any] = field(default_factory=dict)  # noqa: UP006


ConfigStore.instance().store(
    group="hydra/sweeper",
    name="optuna_resumable_schema",
    node=ResumableOptunaSweeperConf,
    provider="experiments",
)


class ResumableOptunaSweeper(Sweeper):
    """Checks its settings as Hydra makes it (one line, exit 2, before anything is written),
    then hands Hydra's calls to experiments.sweepers.optuna."""

    def __init__(self, **settings: Any) -> None:
        from experiments.errors import ConfigError
        from experiments.sweepers.optuna import ResumableOptunaSweeperImpl

        try:
            self.sweeper = ResumableOptunaSweeperImpl(**settings)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(ConfigError.exit_code)

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> None:  # noqa: UP006
        return self.sweeper.sweep(arguments)
