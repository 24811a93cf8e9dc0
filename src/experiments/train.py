"""`experiments-train` / `python -m experiments.train`: compose, validate, launch, record.

Reads top to bottom: the callback (callbacks.py) has already validated the composed config
before Hydra made the run directory, and taken the run's lock when this process owns it. The
process's role (role.py), decided once here, says what it does with the plan: a sweep's login
starts each point's process, a run's owner launches torchrun's ranks (launchers/) or trains
here (training.py), as do those ranks and a Slurm job's tasks; run/ records how it ended.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from experiments import callbacks, composition_errors, launchers, role, training
from experiments.callbacks import print_config_error
from experiments.errors import ConfigError
from experiments.launchers import children
from experiments.launchers.command import resume_command, user_command
from experiments.plan import build_plan, objective_value
from experiments.role import Kind, Role
from experiments.run import lock
from experiments.run.record import NoSpaceError, read_summary
from experiments.run.summary import record_extensions, record_failure

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
    process = role.of_process(hydra_cfg.mode)
    launchers.prepare_process(process)  # a Slurm task's ranks; a local sweep point's Ctrl-C
    run_dir = Path(hydra_cfg.runtime.output_dir)
    planned = held = False
    try:
        held = _before_writing(process, hydra_cfg, run_dir, cfg.launcher.name)
        plan = _plan_of(cfg, hydra_cfg)
        planned = True  # from here on, run() records a rank's failure itself
        config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        value = run(plan, process, hydra_cfg.runtime.cwd, config)
        if process.kind is Kind.SWEEP_LOGIN:
            _between_points(hydra_cfg)  # the point stopped (or ended): no further one
        return value
    except Exception as error:
        return _failed(process, hydra_cfg, error, planned)
    finally:
        if held:  # the point's ranks have ended: the next launch may take it
            lock.release(run_dir)


def _before_writing(process: Role, hydra_cfg: Any, run_dir: Path, launcher: str) -> bool:
    """One writer per run directory (run/lock.py); whether this process took it here. A run's
    own process and a local sweep's point took it before Hydra made the directory
    (callbacks.on_run_start). A sweep's login owns a point it launches torchrun's ranks for,
    for as long as they run; a point of its own process takes its directory itself, so the
    login only refuses one another run holds, having written nothing. A Slurm job's rank 0
    takes its run's (back, when the job was requeued); its other tasks refuse what another run
    holds, as rank 0 is refused."""
    launches_ranks = process.kind is Kind.SWEEP_LOGIN and launcher == "torchrun"
    if process.kind is Kind.SWEEP_LOGIN:
        _between_points(hydra_cfg)  # Ctrl-C between points: start no other one
    if launches_ranks or (process.kind is Kind.SLURM_TASK and process.owner):
        lock.hold(run_dir)
    elif process.kind is Kind.SWEEP_LOGIN:
        lock.refuse_if_held(run_dir)
    elif process.kind is Kind.SLURM_TASK:
        lock.refuse_if_held(run_dir, ours=process.attempt)
    else:
        return False
    lock.check_readable(run_dir)  # a newer version's: refused
    return launches_ranks


def _between_points(hydra_cfg: Any) -> None:
    from experiments.launchers import local

    if local.ctrl_c_received():
        callbacks.stop_sweep(hydra_cfg)


def _failed(process: Role, hydra_cfg: Any, error: Exception, planned: bool) -> float:
    """A run's own process, a sweep's point and a torchrun rank exit with the failure (a
    refused directory: 2, a full disk: 1, one line each). A sweep's job function (its login
    for a local point, a Slurm task) records it as that point's, and the sweep goes on: the
    sweeper gets NaN (Optuna marks the trial failed), the report counts it, and the sweep's
    exit status is decided when all points are done (callbacks.on_multirun_end)."""
    job = process.kind in (Kind.SWEEP_LOGIN, Kind.SLURM_TASK)
    if isinstance(error, (lock.RunDirRefused, NoSpaceError)):  # one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        if job:
            return math.nan
        sys.exit(ConfigError.exit_code if isinstance(error, lock.RunDirRefused) else 1)
    if not job:
        if isinstance(error, ConfigError):  # a single run's config was checked earlier
            print_config_error(error)
        raise error
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if not planned:  # a Slurm rank failed before its run started: its peers may wait for it
        training.report_failure(run_dir, process, error)
    if process.rank != 0:
        raise error  # a rank of a multi-rank Slurm job: its task fails; rank 0 records the run
    record_failure(run_dir, list(hydra_cfg.overrides.task), error)
    # launcher=slurm runs a plain command as a one-point sweep: to its user, one run.
    where = f"sweep point {hydra_cfg.job.num}" if callbacks.asked_for_sweep() else "run"
    log.error("%s failed: %s", where, error)
    return math.nan


def _plan_of(cfg: DictConfig, hydra_cfg: Any) -> Any:
    """A single run's plan, made before Hydra made its directory; a sweep point's, made here.
    The point's login checked it against the directory's record and recorded its extensions
    (callbacks.on_multirun_start); Hydra has since rewritten .hydra/config.yaml with this
    point's config, and in a multi-task Slurm job every task rewrites it at once: read here,
    it could be half-written (a requeued 2-task GAN job's rank 0 read it empty, failed, and
    left rank 1 in the rendezvous). A local sweep's login launches each point with the plan
    it built for it before the first point started (the same overrides in the same directory:
    the same composed config), rather than composing and checking it again."""
    run_dir = Path(hydra_cfg.runtime.output_dir)
    plan = callbacks.planned
    if plan is not None and plan.run_dir == run_dir:
        return plan
    plan = callbacks.sweep_plans.get(run_dir.absolute())
    if plan is not None and plan.overrides == list(hydra_cfg.overrides.task):
        return plan
    return build_plan(
        cfg,
        hydra_cfg.runtime.output_dir,
        list(hydra_cfg.overrides.task),
        dict(hydra_cfg.runtime.choices),
        check_record=False,
    )


def run(plan: Any, process: Role, cwd: str, config: dict[str, Any]) -> Any:
    """A single run's own process (not a rank, a sweep point or a Slurm job, whose sweep
    directory the same command finds again) says as it starts, and again if it stops short,
    the one command that continues it in its directory: a kill -9 leaves the first line on
    the screen, and summary.json keeps it (resume_command)."""
    commands = (user_command(), resume_command(process, plan.run_dir))
    line = f"To resume this run if it stops: {commands[1]}" if process.kind is Kind.RUN else None
    try:
        value = _run(plan, process, training.TrainHere(process, cwd, config, commands), line)
    except training.Ended:
        raise  # the run stopped itself for a reason a resume would meet again
    except BaseException:
        if line is not None:
            print(line, file=sys.stderr, flush=True)
        raise
    if line is not None and isinstance(value, float) and math.isnan(value):  # it stopped
        print(line, file=sys.stderr, flush=True)
    return value


def _run(plan: Any, process: Role, here: training.TrainHere, line: str | None) -> Any:
    # The extensions this launch makes, recorded by the owner before any process starts.
    kept = record_extensions(plan) if process.kind is Kind.RUN else read_summary(plan.run_dir)
    if kept and kept.get("status") == "completed" and plan.resume == "auto":
        return _already_completed(plan, kept)
    if line is not None:
        print(line, flush=True)
    # what every process of the run inherits (SpikingJelly's neuron-kernel pin: snn/neurons.py)
    os.environ.update(getattr(plan, "process_environment", {}))
    # The role's way to run the plan: start torchrun's ranks or a sweep's point, or train here.
    way = children.launch_for(plan, process, here.config) or here
    metrics = way.run(plan, kept)
    return math.nan if metrics is None else objective_value(plan, metrics)


def _already_completed(plan: Any, previous: dict[str, Any]) -> Any:
    value = objective_value(plan, previous["metrics"])
    shown = f"{value:.4f}" if isinstance(value, float) else str(value)
    done = f"Run already completed: {plan.run_dir} ({plan.objective}={shown})"
    print(f"{done}; resume=null retrains it.")
    return value


USAGE = """\
usage: experiments-train [KEY=VALUE ...] [-m] [--config-dir DIR] [--cfg job] [--help]

A bare call trains nothing: name what to run, e.g.
  experiments-train experiment=digits_sew_resnet18   # the main job
  experiments-train model=sew_resnet18               # the defaults
  experiments-train model=sew_resnet18 dry_run=true  # the checked plan, nothing written
experiments-train --help lists the config groups, the common keys and the exit status.
"""


def main() -> None:
    """Console entry point. Hydra exits 1 on a composition error (unknown group option,
    unknown key): those are config errors too, so they exit 2 like our own validation."""
    started_by = role.of_process()  # a launched child's role is its environment's
    if not sys.argv[1:] and not started_by.launched:
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
    if started_by.kind in (Kind.TORCHRUN_RANK, Kind.SWEEP_POINT):
        _worker_exits_without_teardown()


def _worker_exits_without_teardown() -> None:
    """A torchrun rank (or a local sweep's point) whose run returned (its records written, its
    process group destroyed) ends here: Python's exit handlers run, then the process exits
    without the interpreter's and the C++ libraries' teardown. Seen once in a 2-rank FSDP2
    run on gloo under load: the non-leader rank, done first, aborted while exiting
    ("terminate called without an active exception", SIGABRT: a native thread still joinable
    at teardown), and torchrun killed rank 0 while it was still writing the run's summary,
    so a finished run failed."""
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
