"""The resumable Optuna sweeper as a Hydra plugin: Hydra instantiates sweepers only from the
hydra_plugins namespace. The work is in experiments.sweepers.optuna, imported when a search
starts (Hydra imports this module at every start-up: it must stay cheap).

Its config schema is hydra-optuna-sweeper's plus the pruner (experiments.sweepers.pruning):
`pruner: median|hyperband|none` and `pruner_kwargs`, the pruner class's own arguments."""

# No `from __future__ import annotations`: Hydra imports plugin modules outside sys.modules,
# where dataclasses cannot resolve string annotations (and OmegaConf reads the real ones).
import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Optional  # noqa: UP035 (see above)

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

# Importing optuna (Hydra does, instantiating the sampler before the sweeper) imports alembic,
# which logs a line at INFO for each plugin of its own.
logging.getLogger("alembic").setLevel(logging.WARNING)


@dataclass
class ResumableOptunaSweeperConf(OptunaSweeperConf):
    _target_: str = "hydra_plugins.experiments_sweepers.optuna_resumable.ResumableOptunaSweeper"
    pruner: Optional[str] = "none"  # noqa: UP045
    pruner_kwargs: Dict[str, Any] = field(default_factory=dict)  # noqa: UP006


ConfigStore.instance().store(
    group="hydra/sweeper",
    name="optuna_resumable_schema",
    node=ResumableOptunaSweeperConf,
    provider="experiments",
)


class ResumableOptunaSweeper(OptunaSweeper):
    """hydra-optuna-sweeper's config schema (+ pruner), experiments.sweepers.optuna's loop."""

    def __init__(self, pruner: Any = "none", pruner_kwargs: Any = None, **kwargs: Any) -> None:
        from experiments.composition import plain
        from experiments.errors import ConfigError
        from experiments.sweepers import pruning
        from experiments.sweepers.optuna import ResumableOptunaSweeperImpl

        try:  # before the search starts or writes anything: one line, exit 2
            checked = pruning.check(pruner, plain(pruner_kwargs))
            if checked[0] != "none" and not kwargs.get("storage"):
                raise ConfigError(
                    "hydra.sweeper.pruner",
                    checked[0],
                    "none with storage=null: trials report to the study's storage",
                )
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(ConfigError.exit_code)
        self.sweeper = ResumableOptunaSweeperImpl(**kwargs, pruning=checked)
