"""The resumable Optuna sweeper as a Hydra plugin: Hydra instantiates sweepers only from the
hydra_plugins namespace. The work is in experiments.sweepers.optuna, imported when a search
starts (Hydra imports this module at every start-up: it must stay cheap)."""

from __future__ import annotations

import logging
from typing import Any

from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

# Importing optuna (Hydra does, instantiating the sampler before the sweeper) imports alembic,
# which logs a line at INFO for each plugin of its own.
logging.getLogger("alembic").setLevel(logging.WARNING)


class ResumableOptunaSweeper(OptunaSweeper):
    """hydra-optuna-sweeper's config schema, experiments.sweepers.optuna's search loop."""

    def __init__(self, **kwargs: Any) -> None:
        from experiments.sweepers.optuna import ResumableOptunaSweeperImpl

        self.sweeper = ResumableOptunaSweeperImpl(**kwargs)
