"""The run config's own keys (conf/train.yaml), around the config groups.

`objective`, `resume` and `paper` are checked by the family (which metrics it reports, which
checkpoints it reads, the recipe a paper's preset carries); what a key can be on its own is
checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from experiments.errors import ConfigError
from experiments.validation import integer

# dry_run=...: train (false), print the plan (true), the plan as JSON, or the environment's
# checks as a table (doctor). Not an enum: OmegaConf has no type for true/false or a word.
DRY_RUNS = (False, True, "json", "doctor")


@dataclass
class RunConfig:
    """conf/train.yaml. The groups' nodes are typed by their options' own schemas (or, for
    model, data and optimizer, checked against the class or builder they name), so here they
    are Any and default to None: `from_values` checks the run's own keys alone."""

    seed: int
    paper: Any  # a paper preset's recipe card (snn/recipe_card.py checks it); null otherwise
    objective: Any  # auto, a metric, or a list of metrics (a multi-objective search)
    dry_run: Any  # one of DRY_RUNS
    preflight: bool  # check the environment before launch (preflight.py)
    resume: str | None  # auto, null or a checkpoint directory
    resume_from: str | None  # GAN: another run's iter_N.pth, whole training state
    load_from: str | None  # GAN: another run's iter_N.pth, weights only
    model: Any = None
    data: Any = None
    topology: Any = None
    launcher: Any = None
    optimizer: Any = None
    trainer: Any = None
    logger: Any = None

    def __post_init__(self) -> None:
        integer(self.seed, "seed", minimum=0)
        if self.dry_run not in DRY_RUNS:
            raise ConfigError("dry_run", self.dry_run, "one of false, true, json, doctor")

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> RunConfig:
        """The run's own keys of a composed, resolved config (composition._resolve)."""
        return cls(
            seed=values["seed"],
            paper=values["paper"],
            objective=values["objective"],
            dry_run=values["dry_run"],
            preflight=values["preflight"],
            resume=values["resume"],
            resume_from=values["resume_from"],
            load_from=values["load_from"],
        )
