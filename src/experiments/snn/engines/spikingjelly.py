"""CUDA engine: hand the plan's TrainingConfig to SpikingJelly's own `train_classification`.

Nothing of the training is ours here. We pick the newest checkpoint for auto-resume
(SpikingJelly's checkpoints are `step_N/` folders with a config.json), route SpikingJelly's
per-epoch JSON log lines (loguru) into metrics.jsonl, and map its result onto our summary keys.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from experiments.run.record import RunRecorder
from experiments.snn.plan import RunPlan


def newest_spikingjelly_checkpoint(root: Path) -> Path | None:
    if not root.is_dir():
        return None
    found = sorted(p for p in root.glob("step_*") if (p / "config.json").is_file())
    return found[-1] if found else None


def _metrics_sink(recorder: RunRecorder) -> Any:
    """SpikingJelly logs (through loguru) one JSON object per epoch on rank 0."""

    def sink(message: Any) -> None:
        try:
            value = json.loads(message.record["message"])
        except ValueError:
            return
        if isinstance(value, dict) and "validation_accuracy" in value:
            recorder.log_metrics(
                {
                    "step": value["optimizer_step"],
                    "epoch": value["epoch"],
                    "train_loss": value["train_loss"],
                    "val_loss": value["validation_loss"],
                    "val_accuracy": value["validation_accuracy"],
                }
            )

    return sink


def train(plan: RunPlan, recorder: RunRecorder) -> dict[str, Any]:
    from spikingjelly.activation_based.distributed.vision import train_classification

    config = plan.training_config
    if plan.resume == "auto" and config.checkpoint_dir is not None:
        latest = newest_spikingjelly_checkpoint(config.checkpoint_dir)
        if latest is not None:
            config = dataclasses.replace(config, resume=latest)
            recorder.summary["resumed_from"] = str(latest)
    from spikingjelly.logger import logger

    logger.enable("spikingjelly")
    sink_id = logger.add(
        _metrics_sink(recorder),
        level="INFO",
        filter=lambda record: record["name"].startswith("spikingjelly"),
    )
    try:
        result = train_classification(config)
    finally:
        logger.remove(sink_id)
    return {
        "val_accuracy": result["validation_accuracy"],
        "val_loss": result["validation_loss"],
        "train_loss": result["train_loss"],
        "images_per_second": result["images_per_second"],
        "steps": int(result["optimizer_step"]),
        "global_batch": int(result["global_batch_size"]),
        "peak_memory_mb": result["peak_memory_bytes"] / 2**20,
        "library_result": result,
    }
