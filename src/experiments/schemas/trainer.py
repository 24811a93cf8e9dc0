"""`trainer=<name>`'s schemas: the nodes every trainer option shares (`trainer.spikes`,
`trainer.early_stopping`).

What these keys mean for a run is the code's that uses them (snn/spikes.py,
run/early_stopping.py); what depends on the family or the topology (which metrics a family
evaluates, how many images each rank measures) is checked there, where those are known.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from experiments.errors import ConfigError


class EnergyCosts(StrEnum):
    """SpikingJelly's SimpleEnergyCostConfig presets (op_counter)."""

    fp32 = "fp32"  # E_MAC 4.6 pJ, E_AC 0.9 pJ
    fp16 = "fp16"
    int8 = "int8"


@dataclass
class SpikesConfig:
    """`trainer.spikes`: spike activity and energy after each evaluation (snn/spikes.py)."""

    images: Any  # the slice of the validation set: an integer >= 0 (0: off), or auto
    seed: int  # which validation images (the same at every evaluation)
    costs: EnergyCosts
    guard: int | None  # evaluations in a row a layer may stay silent or saturated; null: off

    def __post_init__(self) -> None:
        if self.images != "auto" and (
            isinstance(self.images, bool) or not isinstance(self.images, int) or self.images < 0
        ):
            raise ConfigError(
                "trainer.spikes.images", self.images, "an integer >= 0 or auto (0: off)"
            )
        if self.seed < 0:
            raise ConfigError("trainer.spikes.seed", self.seed, "an integer >= 0")
        if self.guard is not None and self.guard < 1:
            raise ConfigError(
                "trainer.spikes.guard",
                self.guard,
                "an integer >= 1 (evaluations in a row a layer may stay silent or saturated "
                "before the run stops), or null: off",
            )


class StopMode(StrEnum):
    auto = "auto"  # max for an accuracy, min for a loss
    max = "max"
    min = "min"


@dataclass
class EarlyStoppingConfig:
    """`trainer.early_stopping` (run/early_stopping.py resolves `auto` for the family)."""

    patience: int | None  # evaluations without improvement; null: off
    metric: str  # auto: the family's first monitored metric
    mode: StopMode
    min_delta: float  # a change of at most this much is no improvement

    def __post_init__(self) -> None:
        if self.patience is not None and self.patience < 1:
            raise ConfigError(
                "trainer.early_stopping.patience",
                self.patience,
                "an integer >= 1 (evaluations without improvement before stopping), or null: off",
            )
        if not self.min_delta >= 0:  # (NaN too)
            raise ConfigError(
                "trainer.early_stopping.min_delta", self.min_delta, "a number >= 0, e.g. 0.001"
            )
