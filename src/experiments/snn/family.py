"""The SNN family as the shared code sees it (experiments/families.py): SpikingJelly models,
SpikingJelly's own loop (`train_classification`) and its classic Trainer.

Kept light (no torch, no SpikingJelly at import): the registry reads it to pick a family
before anything heavy is imported; engines and the planner are named, imported when used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.families import Curve, Family, Tradeoff

OBJECTIVE = "val_accuracy"  # the metric a sweep optimises and a re-run reports


def _owns(model: Mapping[str, Any]) -> bool:
    return model.get("family", "snn") == "snn"  # the default: SNN models carry no `family:`


def completed_lines(plan: Any, summary: dict[str, Any]) -> str:
    metrics = summary["metrics"]
    return (
        f"\nRun completed in {summary['wall_time_s']:.1f} s "
        f"({metrics['steps']} steps, {summary['engine']} engine, "
        f"world size {summary['world_size']})\n"
        f"  val_accuracy  {metrics['val_accuracy']:.4f}\n"
        f"  val_loss      {metrics['val_loss']:.4f}\n"
        f"  train_loss    {metrics['train_loss']:.4f} (last epoch mean)\n"
        f"  images/s      {metrics['images_per_second']:.1f}\n"
        + _spike_lines(metrics)
        + _profile_line(metrics)
        + f"  run directory {plan.run_dir.resolve()}"
    )


def _spike_lines(metrics: dict[str, Any]) -> str:
    """The last evaluation's spike and energy figures (snn/spikes.py), where measured."""
    if "firing_rate" not in metrics:
        return ""
    return (
        f"  firing rate   {metrics['firing_rate']:.4f} (spikes per neuron per step; per layer: "
        "spikes.json, spikes.png)\n"
        f"  energy        {metrics['energy_per_image_mj']:.4g} mJ per image "
        f"({metrics['synops_per_image']:.4g} synaptic operations)\n"
    )


def _profile_line(metrics: dict[str, Any]) -> str:
    if "profile_step_ms_per_rank" not in metrics:
        return ""
    steps, collectives = (
        metrics["profile_step_ms_per_rank"],
        metrics["profile_collective_ms_per_rank"],
    )
    per_rank = ", ".join(f"{c / s:.0%}" for s, c in zip(steps, collectives, strict=True) if s)
    return (
        f"  profile       {max(steps):.0f} ms/step, collectives in flight {per_rank} "
        f"(per rank; traces in profile/, TensorBoard's PyTorch Profiler tab)\n"
    )


FAMILY = Family(
    name="snn",
    owns=_owns,
    engines={
        "spikingjelly": "experiments.snn.engines.spikingjelly",
        "classify": "experiments.snn.engines.classify",
    },
    planner="experiments.snn.plan:build_snn_plan",
    objective=OBJECTIVE,
    higher_is_better=True,
    metrics=(
        "val_accuracy",
        "val_loss",
        "train_loss",
        "images_per_second",
        "steps",
        "firing_rate",
        "energy_per_image_mj",
    ),
    curves=(
        Curve("metrics.jsonl", "epoch", "val_accuracy", "epoch", "Validation accuracy"),
        Curve("steps.jsonl", "step", "loss", "optimizer step", "Training loss"),
    ),
    monitored=("val_accuracy", "val_loss", "train_loss"),
    monitored_source="an SNN run evaluates",
    retired_engines={
        "cpu": "our CPU engine, which is gone: SpikingJelly's train_classification cannot "
        "resume its checkpoints (experiments-eval and experiments-export still read them); "
        "resume=null retrains this run in its directory, or use another hydra.run.dir",
    },
    completed_lines=completed_lines,
    evaluator="experiments.snn.evaluate",
    exporter="experiments.snn.export",
    other_objectives={"energy_per_image_mj": False, "firing_rate": False, "val_loss": False},
    tradeoff=Tradeoff(
        "energy_per_image_mj",
        "energy per image (mJ, SpikingJelly's energy model)",
        "accuracy_vs_energy.png",
    ),
    warm_modules=(
        "experiments.snn.plan",
        "experiments.snn.models.sew_resnet",
        "experiments.snn.models.spikformer",
    ),
    # the paper presets' timm schedules (snn/epoch_schedule.py), Mixup and augmentations
    # (data/augment.py): their plans import it
    warm_if_planned=("timm",),
)
