"""What a report shows for each model family: its columns, its objective and its curves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Curve:
    """One learning-curve panel: `y` against `x` from one of a run's JSON-lines logs."""

    log: str
    x: str
    y: str
    xlabel: str
    title: str


@dataclass(frozen=True)
class Family:
    metrics: tuple[str, ...]
    objective: str
    higher_is_better: bool
    curves: tuple[Curve, Curve]

    def rank_key(self, value: float) -> float:
        """Sorting by this puts the best value first."""
        return -value if self.higher_is_better else value


SNN = Family(
    ("val_accuracy", "val_loss", "train_loss", "images_per_second", "steps"),
    "val_accuracy",
    True,
    (
        Curve("metrics.jsonl", "epoch", "val_accuracy", "epoch", "Validation accuracy"),
        Curve("steps.jsonl", "step", "loss", "optimizer step", "Training loss"),
    ),
)
GAN = Family(  # MMGen runs: SWD to the data (lower is better), the two networks' losses
    ("swd", "ms_ssim", "loss_gen", "loss_disc", "images_per_second", "steps"),
    "swd",
    False,
    (
        Curve("metrics.jsonl", "step", "loss_gen", "iteration", "Generator loss"),
        Curve("metrics.jsonl", "step", "loss_disc", "iteration", "Discriminator loss"),
    ),
)


def family(points: list[dict[str, Any]]) -> Family:
    engines = {p["summary"].get("engine") for p in points} - {None}  # None: unreadable
    return GAN if engines == {"mmgen"} else SNN
