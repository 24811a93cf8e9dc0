"""`experiments-train` / `python -m experiments.train`: compose, validate, launch, record.

Reads top to bottom: the callback (callbacks.py) has already validated the composed config
before Hydra made the run directory; here the plan picks the engine for the model family and
the launcher decides who runs it.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from experiments import callbacks, distributed_env
from experiments.callbacks import print_config_error
from experiments.composition import user_overrides
from experiments.errors import ConfigError
from experiments.plan import build_plan
from experiments.run import failures, lock
from experiments.run.checkpoint import CheckpointError
from experiments.run.early_stopping import Pruned
from experiments.run.record import (
    COMMAND_ENV,
    NoSpaceError,
    RunRecorder,
    git_commit,
    no_space,
    read_summary,
    user_command,
    versions,
    write_json_atomic,
)
from experiments.snn.plan import RunPlan

log = logging.getLogger("experiments.train")


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def app(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    if cfg.get("dry_run"):
        # The callback answers a dry run and exits before Hydra makes a directory. Reaching
        # the run path with dry_run set means that did not happen: never train, submit or
        # record here (torchrun ranks, sweep children and Slurm jobs all pass through here).
        print(
            "error: dry_run is set but the run path was reached; nothing was trained",
            file=sys.stderr,
        )
        sys.exit(ConfigError.exit_code)
    if distributed_env.in_slurm_job():
        from experiments.launchers import slurm

        slurm.export_rank_env()
    from experiments.launchers import local

    if local.is_sweep_point():
        local.point_stops_on_ctrl_c()  # Ctrl-C at the sweep: checkpoint, `interrupted`
    sweep_login = hydra_cfg.mode == RunMode.MULTIRUN and not (
        distributed_env.is_worker() or distributed_env.in_slurm_job()
    )
    try:
        # One writer per run directory (run/lock.py): a single run took it before Hydra made
        # the directory (callbacks.on_run_start); a local sweep's login holds its point's for
        # the point's process, which joins it; a Slurm task joins its job's.
        if sweep_login and local.ctrl_c_received():
            callbacks.stop_sweep(hydra_cfg)  # Ctrl-C between points: start no other one
        lock.hold(Path(hydra_cfg.runtime.output_dir))
        lock.check_readable(Path(hydra_cfg.runtime.output_dir))  # a newer version's: refused
        plan = callbacks.planned  # a single run was planned before Hydra made its directory
        if plan is None or plan.run_dir != Path(hydra_cfg.runtime.output_dir):
            plan = build_plan(  # a sweep point (or a plan for another directory)
                cfg,
                hydra_cfg.runtime.output_dir,
                list(hydra_cfg.overrides.task),
                dict(hydra_cfg.runtime.choices),
            )
        value = run(
            plan,
            cwd=hydra_cfg.runtime.cwd,
            warm_points=_warm_points(cfg),
            logger=_container(cfg.get("logger")),
            config=OmegaConf.to_container(cfg, resolve=True),
        )
        if sweep_login and local.ctrl_c_received():
            callbacks.stop_sweep(hydra_cfg)  # the point stopped (or ended): no further one
        return value
    except lock.RunDirRefused as error:  # another run's or version's: write nothing into it
        print(f"error: {error}", file=sys.stderr)
        if hydra_cfg.mode != RunMode.MULTIRUN or distributed_env.is_worker():
            sys.exit(ConfigError.exit_code)
        return math.nan
    except NoSpaceError as error:  # e.g. summary.json at the start: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        if hydra_cfg.mode != RunMode.MULTIRUN or distributed_env.is_worker():
            sys.exit(1)
        return math.nan
    except Exception as error:
        if hydra_cfg.mode != RunMode.MULTIRUN or distributed_env.is_worker():
            if isinstance(error, ConfigError):  # a single run's config was checked earlier
                print_config_error(error)
            raise
        if distributed_env.rank() != 0:
            raise  # a rank of a multi-rank Slurm job: its task fails; rank 0 records the run
        # A sweep goes on past a failed point: it is recorded in its run directory (and the
        # report), the sweeper gets NaN (Optuna marks the trial failed), and the sweep's exit
        # status is decided when all points are done (callbacks.on_multirun_end).
        _record_failure(Path(hydra_cfg.runtime.output_dir), list(hydra_cfg.overrides.task), error)
        # launcher=slurm runs a plain command as a one-point sweep: to its user, one run.
        where = f"sweep point {hydra_cfg.job.num}" if callbacks.asked_for_sweep() else "run"
        log.error("%s failed: %s", where, error)
        return math.nan
    finally:
        if sweep_login:  # the point's process has ended: the next launch may take it
            lock.release(Path(hydra_cfg.runtime.output_dir))


def _record_failure(run_dir: Path, overrides: list[str], error: Exception) -> None:
    summary = read_summary(run_dir) or {"overrides": overrides}
    if summary.get("status") != "failed":
        summary.update(status="failed", error=f"{type(error).__name__}: {error}")
        write_json_atomic(run_dir / "summary.json", summary)


def _container(node: Any) -> dict[str, Any]:
    """A config node as plain data ({} for none: `logger=none` composes an empty node)."""
    if node is None:
        return {}
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def _warm_points(cfg: DictConfig) -> bool:
    launcher = cfg.get("launcher") or {}
    return launcher.get("name") == "local" and bool(launcher.get("warm_points", False))


def run(
    plan: RunPlan,
    cwd: str,
    warm_points: bool = False,
    logger: Any = None,
    config: Any = None,
) -> float | None:
    previous = read_summary(plan.run_dir)
    if previous and plan.extensions:
        # Recorded before any process starts, so torchrun ranks and Slurm tasks (whose own
        # plans see the already rewritten config) carry it on, and the run is no longer done.
        previous["extensions"] = [*previous.get("extensions", []), *plan.extensions]
        previous["status"] = "running"
        write_json_atomic(plan.run_dir / "summary.json", previous)
        print(f"Extending {plan.run_dir}: {'; '.join(plan.extensions)}")
    if previous and previous.get("status") == "completed" and plan.resume == "auto":
        value = previous["metrics"].get(plan.objective)
        print(
            f"Run already completed: {plan.run_dir} ({plan.objective}="
            f"{_format(value)}); resume=null retrains it."
        )
        return value
    child = _child_command(plan)
    if child is not None:
        return _launch_child(plan, child, warm_points)
    rank = distributed_env.rank()
    recorder = RunRecorder(plan.run_dir, _summary(plan, cwd, previous), enabled=rank == 0)
    recorder.start()
    watchdog = failures.Watchdog(
        plan.run_dir, rank, on_peer_failure=lambda peer: _finish_failed(recorder, peer)
    )
    if plan.dims.world_size > 1:
        watchdog.start()  # a peer that dies stops this rank too (run/failures.py)
    try:
        if recorder.enabled and logger:
            recorder.trackers = _open_trackers(plan, logger, config or {})
            recorder.artifact(_write_plan(plan))
        metrics = _engine(plan.engine).train(plan, recorder)
    except SystemExit as stopped:  # by a signal (Slurm requeue, time limit) after a checkpoint
        watchdog.stop()
        recorder.finish("interrupted", interrupted=getattr(stopped, "reason", None))
        raise
    except Pruned as pruned:  # a search's pruner stopped this trial (run/early_stopping.py)
        watchdog.stop()
        recorder.finish("pruned", metrics=pruned.metrics)
        print(f"Run pruned: {pruned}")
        return math.nan
    except CheckpointError as error:
        watchdog.stop()
        recorder.finish("failed", error=str(error))
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:  # Ctrl-C before the engine could stop at a step boundary
        watchdog.stop()
        recorder.finish(
            "interrupted", interrupted="Ctrl-C; the same command resumes from the last checkpoint"
        )
        raise
    except BaseException as error:
        full = no_space(error)
        if full is not None and plan.dims.world_size == 1:
            watchdog.stop()
            _finish_no_space(recorder, full)
            raise SystemExit(1) from None
        watchdog.stop()
        log.error("run failed:\n%s", traceback.format_exc())
        text = f"{type(error).__name__}: {error}"
        if plan.dims.world_size > 1 and failures.attempt() is not None:
            own = failures.write(plan.run_dir, rank, text, _rank_logs(plan, rank))
            if recorder.enabled:
                _finish_failed(recorder, failures.wait_for_cause(plan.run_dir, own))
        else:
            recorder.finish("failed", error=text)
        raise
    watchdog.stop()
    for path in _artifacts(plan, metrics):
        recorder.artifact(path)
    recorder.finish("completed", metrics=metrics)
    if recorder.enabled:
        _report(plan, recorder.summary, logger or {})
    return metrics.get(plan.objective)


def _finish_no_space(recorder: RunRecorder, full: NoSpaceError) -> None:
    """A full disk or quota: one line (the path, the bytes it needed), no traceback. The
    failed write left the previous checkpoint and records as they were; summary.json says
    `failed` if even that small write still fits."""
    print(f"{chr(10) if sys.stderr.isatty() else ''}error: {full}", file=sys.stderr)  # past a bar
    try:
        recorder.finish("failed", error=str(full))
    except NoSpaceError:
        print(f"  (summary.json could not be updated either: {_free(recorder)})", file=sys.stderr)


def _free(recorder: RunRecorder) -> str:
    import shutil

    try:
        return f"{shutil.disk_usage(recorder.run_dir).free} bytes free"
    except OSError as error:
        return str(error)


def _finish_failed(recorder: RunRecorder, cause: dict[str, Any]) -> None:
    """Rank 0 records a multi-rank run's failure under the rank that caused it."""
    recorder.finish("failed", **failures.summary_fields(cause))


def _rank_logs(plan: RunPlan, rank: int) -> list[str]:
    """Where a rank's traceback is: its own log in the run directory, and Slurm's stderr of
    its task."""
    logs = [str(plan.run_dir / f"{HydraConfig.get().job.name}_rank{rank}.log")]
    if distributed_env.in_slurm_job():
        from experiments.launchers import slurm

        stderr = slurm.job_record().get("stderr")
        if stderr:
            logs.append(stderr)
    return logs


def _open_trackers(plan: RunPlan, logger: dict[str, Any], config: dict[str, Any]) -> list[Any]:
    """The logger group's trackers for this run (rank 0)."""
    from experiments import loggers

    return loggers.open_trackers(logger, loggers.run_info(plan, config))


def _write_plan(plan: RunPlan) -> Path:
    """plan.json in the run directory: the artefact every tracker gets first."""
    import json

    plan_file = plan.run_dir / "plan.json"
    plan_file.write_text(json.dumps(plan.as_dict(), indent=2, default=str), encoding="utf-8")
    return plan_file


def _artifacts(plan: RunPlan, metrics: dict[str, Any]) -> list[Path]:
    """What a finished run hands its trackers: a GAN run's sample grids."""
    if plan.engine != "mmgen":
        return []
    return sorted((plan.run_dir / "training_samples").glob("*.png"))


def _child_command(plan: RunPlan) -> list[str] | None:
    """Runs that happen in other processes: torchrun's ranks, and each point of a local -m
    sweep (a crashed or killed point must not take the sweep down with it)."""
    if distributed_env.is_worker():
        return None
    launcher = plan.choices.get("launcher")
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *plan.launch_command[1:]]
    if launcher == "local" and HydraConfig.get().mode == RunMode.MULTIRUN:
        from experiments.launchers import local

        return local.child_command(user_overrides(plan.overrides), str(plan.run_dir))
    return None


def _launch_child(plan: RunPlan, command: list[str], warm_points: bool = False) -> float | None:
    """The children share this run directory; rank 0 among them writes the record. A local
    sweep's point runs in a fork of the sweep's warm process (launchers/warm_points.py)."""
    env = {**os.environ, distributed_env.WORKER_ENV: "1", COMMAND_ENV: user_command()}
    env.update(lock.child_env(plan.run_dir))  # they join this run's lock (run/lock.py)
    if plan.choices.get("launcher") == "local":
        from experiments.launchers import local

        env[local.SWEEP_POINT_ENV] = "1"  # Ctrl-C at the sweep stops it gracefully
    if plan.choices.get("launcher") == "torchrun":
        from experiments.launchers import torchrun

        env.update(torchrun.ENVIRONMENT)
    log.info("launching: %s", shlex.join(plan.launch_command))
    failures.clear(plan.run_dir)  # an earlier launch's failed ranks are not this one's
    from experiments.launchers import warm_points as warm

    if warm_points and warm.available() and command[1:3] == ["-m", "experiments.train"]:
        argv = ["experiments-train", *command[3:]]
        returncode = warm.run_point(plan.engine, argv, env, os.getcwd())
    else:
        returncode = subprocess.run(command, env=env, check=False).returncode
    summary = read_summary(plan.run_dir) or {}
    from experiments.launchers import local

    stopped = summary.get("status") == "interrupted" or (
        local.ctrl_c_received() and summary.get("status") != "failed"
    )
    if returncode != 0 and stopped:  # stopped after a checkpoint, or by Ctrl-C before one
        log.warning("%s interrupted: %s", plan.run_dir, summary.get("interrupted", "Ctrl-C"))
        return math.nan  # the same command resumes it
    if returncode != 0:
        cause = failures.cause(failures.read(plan.run_dir))
        error = RuntimeError(
            summary.get("error")
            or (cause and failures.describe(cause))
            or f"{plan.launch_command[0]} exited with status "
            f"{returncode}; logs: {plan.run_dir}/train_rank*.log"
        )
        _record_failure(plan.run_dir, plan.overrides, error)  # a killed child wrote nothing
        raise error
    return summary.get("metrics", {}).get(plan.objective)


def _engine(name: str) -> Any:
    if name == "mmgen":
        from experiments.gan import engine as gan_mmgen

        return gan_mmgen
    if name == "spikingjelly":
        from experiments.snn.engines import spikingjelly as snn_spikingjelly

        return snn_spikingjelly
    if name == "classify":
        from experiments.snn.engines import classify as snn_classify

        return snn_classify
    from experiments.snn.engines import cpu as snn_cpu

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
        seed=plan.seed,
        command=user_command(),
        overrides=plan.overrides,
        versions=versions(),
        git_commit=git_commit(cwd) or git_commit(str(Path(__file__).parent)),
        resumes=(previous or {}).get("resumes", 0),
        extensions=(previous or {}).get("extensions", []),
        # torchrun restarts after a rank died (launcher.max_restarts); 0 elsewhere
        restarts=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        # the warm process this sweep point was forked from (launcher.warm_points); else null
        warm_worker=int(os.environ.get("EXPERIMENTS_WARM_WORKER", "0")) or None,
    )
    if distributed_env.in_slurm_job():
        from experiments.launchers import slurm

        summary["slurm"] = slurm.job_record()
    return summary


def _format(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _report(plan: RunPlan, summary: dict[str, Any], logger: dict[str, Any]) -> None:
    metrics = summary["metrics"]
    trackers = _tracker_lines(plan, logger)
    if plan.engine == "mmgen":
        print(
            f"\nRun completed in {summary['wall_time_s']:.1f} s "
            f"({metrics['iters']} iterations, MMGen train_model, "
            f"world size {summary['world_size']})\n"
            f"  loss_gen      {_format(metrics.get('loss_gen'))} (last logged iteration)\n"
            f"  loss_disc     {_format(metrics.get('loss_disc'))}\n"
            f"  swd (x1e3)    {_format(metrics.get('swd'))} (generated vs data; lower is better)\n"
            f"  ms_ssim       {_format(metrics.get('ms_ssim'))} (generated pairs; data: "
            f"{_format(metrics.get('ms_ssim_real'))})\n"
            f"  samples       {(plan.run_dir / metrics['final_grid']).resolve()}\n"
            f"  run directory {plan.run_dir.resolve()}" + trackers
        )
        return
    print(
        f"\nRun completed in {summary['wall_time_s']:.1f} s "
        f"({metrics['steps']} steps, {summary['engine']} engine, "
        f"world size {summary['world_size']})\n"
        f"  val_accuracy  {metrics['val_accuracy']:.4f}\n"
        f"  val_loss      {metrics['val_loss']:.4f}\n"
        f"  train_loss    {metrics['train_loss']:.4f} "
        f"({'last epoch mean' if plan.engine in ('classify', 'spikingjelly') else 'last step'})\n"
        f"  images/s      {metrics['images_per_second']:.1f}\n"
        + _profile_line(metrics)
        + f"  run directory {plan.run_dir.resolve()}"
        + trackers
    )


def _tracker_lines(plan: RunPlan, logger: dict[str, Any]) -> str:
    """Where to look at the run in each selected tracker."""
    from experiments import loggers

    where = loggers.sweep_of(plan.run_dir) or plan.run_dir
    lines = []
    if "tensorboard" in logger:
        lines.append(f"  tensorboard   tensorboard --logdir {where.resolve()}")
    if "mlflow" in logger:
        from experiments.loggers import mlflow

        uri = mlflow.tracking_uri(logger["mlflow"] or {}, where)
        lines.append(f"  mlflow        mlflow ui --backend-store-uri {uri}")
    if "wandb" in logger and (logger["wandb"] or {}).get("mode", "offline") == "offline":
        lines.append(f"  wandb         wandb sync {plan.run_dir.resolve()}/wandb/offline-run-*")
    if "csv" in logger:
        folder = (logger["csv"] or {}).get("dir", "csv")
        lines.append(f"  csv           {plan.run_dir.resolve() / folder / 'metrics.csv'}")
    return "".join(f"\n{line}" for line in lines)


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


def main() -> None:
    """Console entry point. Hydra exits 1 on a composition error (unknown group option,
    unknown key): those are config errors too, so they exit 2 like our own validation."""
    for group in ("experiment", "hparams_search"):
        if any(arg.startswith(f"+{group}=") for arg in sys.argv[1:]):
            print(
                f"error: write {group}=<name>, without '+': the {group} group is already in "
                "the defaults list (conf/train.yaml), so '+' would add it a second time",
                file=sys.stderr,
            )
            sys.exit(ConfigError.exit_code)
    if "--version" in sys.argv[1:]:
        from experiments import __version__
        from experiments.run.record import versions

        found = versions()
        print(
            f"experiments-train {__version__} (torch {found.get('torch')}, spikingjelly "
            f"{found.get('spikingjelly')}, hydra-core {found.get('hydra-core')}, mmgen "
            f"{found.get('mmgen') or 'not installed'})"
        )
        return
    try:
        app()
    except SystemExit as exit_:
        if exit_.code == 1 and not callbacks.composed:
            sys.exit(ConfigError.exit_code)
        raise


if __name__ == "__main__":
    main()
