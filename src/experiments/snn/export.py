"""experiments-export for SNN runs: the run's checkpoint (any topology: our sharded step
folders, SpikingJelly's DCP checkpoints, the classic Trainer's .pth) merged into the state
dict of the single-process model that SpikingJelly's builder makes for the run's ModelConfig,
the same model experiments-eval evaluates."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from experiments.errors import ConfigError
from experiments.run import exported
from experiments.run.record import read_summary
from experiments.snn.evaluate import _config, _plan, load_model


def export_run(run_dir: Path, checkpoint: Path | None, out: Path | None, ema: bool | None) -> Path:
    if ema:
        raise ConfigError(
            "--ema",
            None,
            "left out: an SNN run's checkpoints hold its trained weights, no EMA copy",
        )
    if checkpoint is not None and exported.is_exported(checkpoint):
        raise ConfigError("checkpoint", str(checkpoint), "a run's checkpoint, not an export")
    cfg = _config(run_dir, [])
    plan = _plan(run_dir, cfg)
    model, path, step = load_model(plan, run_dir, checkpoint)
    summary = read_summary(run_dir) or {}
    target = out or exported.default_path(run_dir, str(plan.choices.get("model")), step)
    model_config = plan.training_config.model
    return exported.write(
        target,
        model.state_dict(),
        {
            "family": "snn",
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "model_config_class": f"{type(model_config).__module__}.{type(model_config).__name__}",
            "run_dir": str(run_dir),
            "checkpoint": str(path),
            "step": step,
            "engine": summary.get("engine"),
            "metrics": summary.get("metrics") or {},
            "ema": False,
        },
    )
