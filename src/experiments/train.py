"""`experiments-train` / `python -m experiments.train`: compose, validate, launch, record.

Reads top to bottom: the callback (callbacks.py) has already validated the composed config
before Hydra made the run directory; here the launcher (launchers/) decides who runs the plan,
the family (families.py) names the engine that trains it, and run/ records how it ended.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from experiments import callbacks, composition_errors, distributed_env, families, launchers, loggers
from experiments.callbacks import print_config_error
from experiments.composition import plain
from experiments.errors import ConfigError, RunStopped
from experiments.launchers import children, slurm
from experiments.plan import build_plan, objective_value
from experiments.run import failures, lock
from experiments.run.checkpoint import CheckpointError
from experiments.run.early_stopping import Pruned
from experiments.run.record import (
    NoSpaceError,
    RunRecorder,
    no_space,
    resume_command,
)
from experiments.run.summary import (
    finish_failed,
    finish_no_space,
    record_extensions,
    record_failure,
    start_summary,
    write_plan,
)

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
    launchers.prepare_process()  # a Slurm task's ranks; a local sweep point's Ctrl-C
    from experiments.launchers import local  # (imports torch: after the dry run's exit)

    sweep_login = hydra_cfg.mode == RunMode.MULTIRUN and not (
        distributed_env.is_worker() or distributed_env.in_slurm_job()
    )
    running = False
    try:
        # One writer per run directory (run/lock.py): a single run took it before Hydra made
        # the directory (callbacks.on_run_start); a local sweep's login holds its point's for
        # the point's process, which joins it; a Slurm task joins its job's.
        if sweep_login and local.ctrl_c_received():
            callbacks.stop_sweep(hydra_cfg)  # Ctrl-C between points: start no other one
        lock.hold(Path(hydra_cfg.runtime.output_dir))
        lock.check_readable(Path(hydra_cfg.runtime.output_dir))  # a newer version's: refused
        plan = _plan_of(cfg, hydra_cfg)
        running = True  # from here on, run() records a rank's failure itself
        value = run(
            plan,
            cwd=hydra_cfg.runtime.cwd,
            warm_points=_warm_points(cfg),
            logger=plain(cfg.get("logger")) or {},  # (`logger=none`: an empty node)
            config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
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
        run_dir = Path(hydra_cfg.runtime.output_dir)
        if not running and failures.attempt() is not None:
            # A rank of a Slurm job failed before its run started (its peers may be waiting
            # for it in the rendezvous): their watchdogs read this and stop them at once.
            rank = distributed_env.rank()
            text = f"{type(error).__name__}: {error}"
            failures.write(run_dir, rank, text, children.rank_logs(run_dir, rank))
        if distributed_env.rank() != 0:
            raise  # a rank of a multi-rank Slurm job: its task fails; rank 0 records the run
        # A sweep goes on past a failed point: it is recorded in its run directory (and the
        # report), the sweeper gets NaN (Optuna marks the trial failed), and the sweep's exit
        # status is decided when all points are done (callbacks.on_multirun_end).
        record_failure(run_dir, list(hydra_cfg.overrides.task), error)
        # launcher=slurm runs a plain command as a one-point sweep: to its user, one run.
        where = f"sweep point {hydra_cfg.job.num}" if callbacks.asked_for_sweep() else "run"
        log.error("%s failed: %s", where, error)
        return math.nan
    finally:
        if sweep_login:  # the point's process has ended: the next launch may take it
            lock.release(Path(hydra_cfg.runtime.output_dir))


def _plan_of(cfg: DictConfig, hydra_cfg: Any) -> Any:
    """A single run's plan, made before Hydra made its directory; a sweep point's, made here.
    The point's login checked it against the directory's record and recorded its extensions
    (callbacks.on_multirun_start); Hydra has since rewritten .hydra/config.yaml with this
    point's config, and in a multi-task Slurm job every task rewrites it at once: read here,
    it could be half-written (a requeued 2-task GAN job's rank 0 read it empty, failed, and
    left rank 1 in the rendezvous)."""
    plan = callbacks.planned
    if plan is not None and plan.run_dir == Path(hydra_cfg.runtime.output_dir):
        return plan
    return build_plan(
        cfg,
        hydra_cfg.runtime.output_dir,
        list(hydra_cfg.overrides.task),
        dict(hydra_cfg.runtime.choices),
        check_record=hydra_cfg.mode != RunMode.MULTIRUN,
    )


def _already_completed(plan: Any, previous: dict[str, Any]) -> Any:
    value = objective_value(plan, previous["metrics"])
    shown = f"{value:.4f}" if isinstance(value, float) else str(value)
    print(f"Run already completed: {plan.run_dir} ({plan.objective}={shown}); resume=null "
          "retrains it.")  # fmt: skip
    return value


def _node_checks(plan: Any, recorder: RunRecorder, config: dict[str, Any]) -> None:
    """A Slurm task's own checks before it trains (preflight.task): the failed ones as one
    line, which summary.json records; the job ends in seconds instead of failing later."""
    from experiments import preflight

    failed = [check.line() for check in preflight.task(plan, config) if not check.ok]
    if failed:
        recorder.finish("failed", error="; ".join(failed))
        print(f"error: {'; '.join(failed)}", file=sys.stderr)
        raise Ended(1)


def _record_crash(plan: Any, recorder: RunRecorder, rank: int, error: BaseException) -> None:
    """An exception out of the engine, recorded before it propagates: a full disk in one line
    (raised as exit 1 here); a rank's failure under the rank that caused it."""
    full = no_space(error)
    if full is not None and plan.dims.world_size == 1:
        finish_no_space(recorder, full)
        raise SystemExit(1) from None
    log.error("run failed:\n%s", traceback.format_exc())
    text = f"{type(error).__name__}: {error}"
    if plan.dims.world_size > 1 and failures.attempt() is not None:
        own = failures.write(plan.run_dir, rank, text, children.rank_logs(plan.run_dir, rank))
        if recorder.enabled:
            finish_failed(recorder, failures.wait_for_cause(plan.run_dir, own))
    else:
        recorder.finish("failed", error=text)


def _warm_points(cfg: DictConfig) -> bool:
    launcher = cfg.get("launcher") or {}
    return launcher.get("name") == "local" and bool(launcher.get("warm_points", False))


def run(
    plan: Any,
    cwd: str,
    warm_points: bool = False,
    logger: Any = None,
    config: Any = None,
) -> float | None:
    """A single run's own process (not a rank, a sweep point or a Slurm job, whose sweep
    directory the same command finds again) says as it starts, and again if it stops short,
    the one command that continues it in its directory: a kill -9 leaves the first line on
    the screen, and summary.json keeps it (resume_command)."""
    single = not (
        distributed_env.is_worker()
        or distributed_env.in_slurm_job()
        or HydraConfig.get().mode == RunMode.MULTIRUN
    )
    line = f"To resume this run if it stops: {resume_command(plan.run_dir)}" if single else None
    try:
        value = _run(plan, cwd, warm_points, logger, config, line)
    except Ended:
        raise  # the run stopped itself for a reason a resume would meet again
    except BaseException:
        if line is not None:
            print(line, file=sys.stderr, flush=True)
        raise
    if line is not None and value is not None and math.isnan(value):  # its ranks stopped
        print(line, file=sys.stderr, flush=True)
    return value


class Ended(SystemExit):
    """Exit 1 from a run that stopped itself (a failed check: the spike guard, a checkpoint
    that cannot load, the node's preflight): its line says why; no resume command follows."""


def _run(
    plan: Any,
    cwd: str,
    warm_points: bool,
    logger: Any,
    config: Any,
    resume_line: str | None,
) -> float | None:
    previous = record_extensions(plan)  # before any process starts: the run is no longer done
    if previous and previous.get("status") == "completed" and plan.resume == "auto":
        return _already_completed(plan, previous)
    if resume_line is not None:
        print(resume_line, flush=True)
    # what every process of the run inherits (SpikingJelly's neuron-kernel pin: snn/neurons.py)
    os.environ.update(getattr(plan, "process_environment", {}))
    child = children.child_command(plan)
    if child is not None:  # torchrun's ranks, a local sweep's point: they record the run
        return children.launch(plan, child, warm_points)
    family = families.for_engine(plan.engine)
    rank = distributed_env.rank()
    recorder = RunRecorder(
        plan.run_dir,
        start_summary(plan, cwd, previous, slurm.job_record()),
        enabled=rank == 0,
    )
    recorder.start()
    if distributed_env.in_slurm_job() and (config or {}).get("preflight", True):
        _node_checks(plan, recorder, config or {})
    watchdog = failures.Watchdog(
        plan.run_dir, rank, on_peer_failure=lambda peer: finish_failed(recorder, peer)
    )
    if plan.dims.world_size > 1:
        watchdog.start()  # a peer that dies stops this rank too (run/failures.py)
    try:
        try:
            if recorder.enabled and logger:
                info = loggers.run_info(plan, config or {})
                recorder.loggers = loggers.open_loggers(logger, info)
                recorder.artifact(write_plan(plan))
            metrics = family.engine(plan.engine).train(plan, recorder)
        finally:
            watchdog.stop()  # however the engine ended
    except SystemExit as stopped:  # by a signal (Slurm requeue, time limit) after a checkpoint
        recorder.finish("interrupted", interrupted=getattr(stopped, "reason", None))
        raise
    except Pruned as pruned:  # a search's pruner stopped this trial (run/early_stopping.py)
        recorder.finish("pruned", metrics=pruned.metrics)
        print(f"Run pruned: {pruned}")
        return math.nan
    except (CheckpointError, RunStopped) as error:
        recorder.finish("failed", error=str(error))
        print(f"error: {error}", file=sys.stderr)
        raise Ended(1) from None
    except KeyboardInterrupt:  # Ctrl-C before the engine could stop at a step boundary
        recorder.finish(
            "interrupted", interrupted="Ctrl-C; its resume_command resumes from the last checkpoint"
        )
        raise
    except BaseException as error:
        _record_crash(plan, recorder, rank, error)
        raise
    for path in family.artifacts(plan.run_dir, metrics):
        recorder.artifact(path)
    recorder.finish("completed", metrics=metrics)
    if recorder.enabled and family.completed_lines is not None:
        where = loggers.where_to_look(plan.run_dir, logger or {})
        print(family.completed_lines(plan, recorder.summary) + where)
    return objective_value(plan, metrics)


USAGE = """\
usage: experiments-train [KEY=VALUE ...] [-m] [--config-dir DIR] [--cfg job] [--help]

A bare call trains nothing: name what to run, e.g.
  experiments-train experiment=digits_sew_resnet18   # the main job
  experiments-train model=sew_resnet18               # the defaults
  experiments-train model=sew_resnet18 dry_run=true  # the checked plan, nothing written
experiments-train --help lists the config groups, the common keys and the exit status.
"""


def main() -> None:
    """Console entry point. A composition error (a misspelt key, a wrong type, an unknown
    group option) is one line and exit 2 like our own validation (composition_errors.py);
    anything else Hydra's start-up exits 1 with is mapped to 2 as well."""
    if not sys.argv[1:] and not distributed_env.is_worker():
        print(USAGE, end="", file=sys.stderr)
        sys.exit(ConfigError.exit_code)
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
        with composition_errors.reported_in_one_line(sys.argv[1:], config_name="train"):
            app()
    except SystemExit as exit_:
        if exit_.code == 1 and not callbacks.composed:
            sys.exit(ConfigError.exit_code)
        raise
    if distributed_env.is_worker():
        _worker_exits_without_teardown()


def _worker_exits_without_teardown() -> None:
    """A torchrun rank whose run returned (its records written, its process group destroyed)
    ends here: Python's exit handlers run, then the process exits without the interpreter's
    and the C++ libraries' teardown. Seen once in a 2-rank FSDP2 run on gloo under load:
    the non-leader rank, done first, aborted while exiting ("terminate called without an
    active exception", SIGABRT: a native thread still joinable at teardown), and torchrun
    killed rank 0 while it was still writing the run's summary, so a finished run failed."""
    import atexit

    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        # A rank torchrun started (launchers/torchrun.py runs `-m experiments.train`; so
        # does a user's own torchrun): torch elastic's @record writes an exception that ends
        # the rank to the error file torchrun gave it, so torchrun's own failure report names
        # the root cause with its traceback. HYDRA_FULL_ERROR lets the exception through
        # Hydra, which would otherwise print it and exit 1 before @record sees it.
        from torch.distributed.elastic.multiprocessing.errors import record

        os.environ.setdefault("HYDRA_FULL_ERROR", "1")
        record(main)()
    else:
        main()
