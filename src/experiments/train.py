"""`experiments-train` / `python -m experiments.train`: compose, validate, launch, record.

Reads top to bottom: the callback (callbacks.py) has already validated the composed config
before Hydra made the run directory; here the plan picks the engine for the model family and
the launcher decides who runs it.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from experiments import distributed_env
from experiments.callbacks import print_config_error
from experiments.errors import ConfigError
from experiments.plan import RunPlan, build_plan
from experiments.run.checkpoint import CheckpointError
from experiments.run.record import (
    COMMAND_ENV,
    RunRecorder,
    git_commit,
    read_summary,
    user_command,
    versions,
    write_json_atomic,
)

log = logging.getLogger("experiments.train")
_job_started = False


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def app(cfg: DictConfig) -> float | None:
    global _job_started
    _job_started = True
    hydra_cfg = HydraConfig.get()
    try:
        plan = build_plan(
            cfg,
            hydra_cfg.runtime.output_dir,
            list(hydra_cfg.overrides.task),
            dict(hydra_cfg.runtime.choices),
        )
    except ConfigError as error:  # only reachable for sweep points: single runs are checked earlier
        print_config_error(error)
        raise
    return run(plan, cwd=hydra_cfg.runtime.cwd)


def run(plan: RunPlan, cwd: str) -> float | None:
    previous = read_summary(plan.run_dir)
    if previous and previous.get("status") == "completed" and plan.resume == "auto":
        print(
            f"Run already completed: {plan.run_dir} (val_accuracy="
            f"{previous['metrics']['val_accuracy']:.4f}); resume=null retrains it."
        )
        return previous["metrics"].get("val_accuracy")
    if plan.choices.get("launcher") == "torchrun" and not distributed_env.is_worker():
        return _launch_torchrun(plan)
    recorder = RunRecorder(
        plan.run_dir, _summary(plan, cwd, previous), enabled=distributed_env.rank() == 0
    )
    recorder.start()
    try:
        metrics = _engine(plan.engine).train(plan, recorder)
    except CheckpointError as error:
        recorder.finish("failed", error=str(error))
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except BaseException as error:
        recorder.finish("failed", error=f"{type(error).__name__}: {error}")
        log.error("run failed:\n%s", traceback.format_exc())
        raise
    recorder.finish("completed", metrics=metrics)
    if recorder.enabled:
        _report(plan, recorder.summary)
    return metrics["val_accuracy"]


def _launch_torchrun(plan: RunPlan) -> float | None:
    """Start the ranks; they share this run directory and rank 0 writes the record."""
    from experiments.launchers import torchrun

    env = {**os.environ, distributed_env.WORKER_ENV: "1", COMMAND_ENV: user_command()}
    log.info("launching: %s", shlex.join(plan.launch_command))
    returncode = torchrun.launch(plan.launch_command, env)
    summary = read_summary(plan.run_dir) or {}
    if returncode != 0:
        if summary.get("status") != "failed":
            summary.update(status="failed", error=f"torchrun exited with status {returncode}")
            write_json_atomic(plan.run_dir / "summary.json", summary)
        raise RuntimeError(
            f"torchrun exited with status {returncode}; rank logs: {plan.run_dir}/train_rank*.log"
        )
    return summary.get("metrics", {}).get("val_accuracy")


def _engine(name: str) -> Any:
    if name == "spikingjelly":
        from experiments.engines import snn_spikingjelly

        return snn_spikingjelly
    from experiments.engines import snn_cpu

    return snn_cpu


def _summary(plan: RunPlan, cwd: str, previous: dict[str, Any] | None) -> dict[str, Any]:
    described = plan.as_dict()
    summary = {
        key: described[key]
        for key in (
            "model",
            "data",
            "topology",
            "launcher",
            "engine",
            "device",
            "backend",
            "world_size",
            "mesh",
            "batch",
            "parameters",
            "run_dir",
        )
    }
    summary.update(
        seed=plan.training_config.seed,
        command=user_command(),
        overrides=plan.overrides,
        versions=versions(),
        git_commit=git_commit(cwd) or git_commit(str(Path(__file__).parent)),
        resumes=(previous or {}).get("resumes", 0),
        # torchrun restarts after a rank died (launcher.max_restarts); 0 elsewhere
        restarts=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
    )
    return summary


def _report(plan: RunPlan, summary: dict[str, Any]) -> None:
    metrics = summary["metrics"]
    print(
        f"\nRun completed in {summary['wall_time_s']:.1f} s "
        f"({metrics['steps']} steps, {summary['engine']} engine, "
        f"world size {summary['world_size']})\n"
        f"  val_accuracy  {metrics['val_accuracy']:.4f}\n"
        f"  val_loss      {metrics['val_loss']:.4f}\n"
        f"  train_loss    {metrics['train_loss']:.4f} (last step)\n"
        f"  images/s      {metrics['images_per_second']:.1f}\n"
        f"  run directory {plan.run_dir.resolve()}\n"
        f"  tensorboard   tensorboard --logdir {plan.run_dir.resolve()}"
    )


def main() -> None:
    """Console entry point. Hydra exits 1 on a composition error (unknown group option,
    unknown key): those are config errors too, so they exit 2 like our own validation."""
    try:
        app()
    except SystemExit as exit_:
        if exit_.code == 1 and not _job_started:
            sys.exit(ConfigError.exit_code)
        raise


if __name__ == "__main__":
    main()
