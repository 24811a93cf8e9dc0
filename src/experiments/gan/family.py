"""The GAN family as the shared code sees it (experiments/families.py): MMGeneration's
recipes trained by its `train_model`.

Kept light (no torch, no mmcv at import): the registry reads it to pick a family before
anything heavy is imported; the engine and the planner are named, imported when used.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.families import Curve, Family

NAME = "gan"  # a model config's `family:` value
OBJECTIVE = "swd"  # sliced Wasserstein distance to the run's data (x1e3, lower is better)


def _owns(model: Mapping[str, Any]) -> bool:
    return model.get("family") == NAME


def _format(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def completed_lines(plan: Any, summary: dict[str, Any]) -> str:
    metrics = summary["metrics"]
    return (
        f"\nRun completed in {summary['wall_time_s']:.1f} s "
        f"({metrics['iters']} iterations, MMGen train_model, "
        f"world size {summary['world_size']})\n"
        f"  loss_gen      {_format(metrics.get('loss_gen'))} (last logged iteration)\n"
        f"  loss_disc     {_format(metrics.get('loss_disc'))}\n"
        f"  swd (x1e3)    {_format(metrics.get('swd'))} (generated vs data; lower is better)\n"
        f"  ms_ssim       {_format(metrics.get('ms_ssim'))} (generated pairs; data: "
        f"{_format(metrics.get('ms_ssim_real'))})\n"
        f"  samples       {(plan.run_dir / metrics['final_grid']).resolve()}\n"
        f"  run directory {plan.run_dir.resolve()}"
    )


def artifacts(run_dir: Path, metrics: dict[str, Any]) -> list[Path]:
    """A finished run's sample grids, for its loggers."""
    return sorted((run_dir / "training_samples").glob("*.png"))


FAMILY = Family(
    name=NAME,
    owns=_owns,
    engines={"mmgen": "experiments.gan.engine"},
    planner="experiments.gan.plan:plan_run",
    objective=OBJECTIVE,
    higher_is_better=False,
    metrics=("swd", "ms_ssim", "loss_gen", "loss_disc", "images_per_second", "steps"),
    curves=(
        Curve("metrics.jsonl", "step", "loss_gen", "iteration", "Generator loss"),
        Curve("metrics.jsonl", "step", "loss_disc", "iteration", "Discriminator loss"),
    ),
    monitored=("loss_gen", "loss_disc"),
    monitored_source="a GAN run logs",
    completed_lines=completed_lines,
    artifacts=artifacts,
    evaluator="experiments.gan.evaluate",
    exporter="experiments.gan.export",
    logs_through_mmcv=True,
)
