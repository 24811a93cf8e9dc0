"""A run trained in this process: its record started, the family's engine run, and how it
ended recorded once.

The process is the run's owner (a single local run, a local sweep's point, a Slurm job's
rank 0: they write the record themselves), another task of a Slurm job, or a rank torchrun
started for the owner (its rank 0 reports the record to the owner: run/channel.py). Only rank
0's recorder records; every rank that fails reports its failure (run/failures.py).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

from experiments import families, loggers
from experiments.errors import RunStopped
from experiments.launchers import slurm
from experiments.role import Kind, Role
from experiments.run import failures
from experiments.run.checkpoint import CheckpointError
from experiments.run.early_stopping import Pruned
from experiments.run.record import RunRecorder
from experiments.run.summary import finish_crashed, finish_failed, start_record, write_plan


class Ended(SystemExit):
    """Exit 1 from a run that stopped itself (a failed check: the spike guard, a checkpoint
    that cannot load, the node's preflight): its line says why; no resume command follows."""


class TrainHere:
    """How a process whose role is to train runs its plan (the other way: launchers/children's
    Launch). `config`: the resolved config the plan was made from; `commands`: the user's
    command and the one that continues the run (launchers/command.py)."""

    def __init__(
        self, role: Role, cwd: str, config: dict[str, Any], commands: tuple[str, str]
    ) -> None:
        self.role = role
        self.cwd = cwd
        self.config = config
        self.commands = commands
        self.logger = config.get("logger") or {}  # (`logger=none`: an empty node)

    def run(self, plan: Any, previous: dict[str, Any] | None) -> dict[str, Any] | None:
        """Train `plan` here: its metrics, or None when a search's pruner stopped it."""
        role = self.role
        job = slurm.job_record(role)
        recorder = start_record(plan, role, self.cwd, previous, job, self.commands)
        if role.kind is Kind.SLURM_TASK and self.config.get("preflight", True):
            _node_checks(plan, recorder, self.config)
        watchdog = failures.Watchdog(
            plan.run_dir, role.rank, on_peer_failure=functools.partial(finish_failed, recorder)
        )
        if plan.dims.world_size > 1 and not role.watched_by_torch_elastic:
            watchdog.start()  # a peer that dies stops this rank too (run/failures.py)
        family = families.for_engine(plan.engine)
        try:
            try:
                if recorder.enabled and self.logger:
                    info = loggers.run_info(plan, self.config)
                    recorder.loggers = loggers.open_loggers(self.logger, info)
                    recorder.artifact(write_plan(plan))
                metrics = family.engine(plan.engine).train(plan, recorder)
            finally:
                watchdog.stop()  # however the engine ended
        except BaseException as error:
            return _ended(plan, role, recorder, error, rank_logs(plan.run_dir, role, job))
        for path in family.artifacts(plan.run_dir, metrics):
            recorder.artifact(path)
        recorder.finish("completed", metrics=metrics)
        if recorder.enabled and family.completed_lines is not None:
            where = loggers.where_to_look(plan.run_dir, self.logger)
            print(family.completed_lines(plan, recorder.summary) + where)
        return metrics


def _node_checks(plan: Any, recorder: RunRecorder, config: dict[str, Any]) -> None:
    """A Slurm task's own checks before it trains (preflight.task): the failed ones as one
    line, which summary.json records; the job ends in seconds instead of failing later."""
    from experiments import preflight

    failed = [check.line() for check in preflight.task(plan, config) if not check.ok]
    if failed:
        recorder.finish("failed", error="; ".join(failed))
        print(f"error: {'; '.join(failed)}", file=sys.stderr)
        raise Ended(1)


def _ended(
    plan: Any, role: Role, recorder: RunRecorder, error: BaseException, logs: list[str]
) -> None:
    """How the engine ended, recorded once: stopped by a signal after a checkpoint
    (interrupted), by a search's pruner, by a failed check of its own (one line), by Ctrl-C
    before a checkpoint, or by an error (under the rank that caused it; `logs`: where its
    traceback is). Re-raises, but for a pruned run (None)."""
    if isinstance(error, Pruned):  # a search's pruner stopped this trial (run/early_stopping)
        recorder.finish("pruned", metrics=error.metrics)
        print(f"Run pruned: {error}")
        return None
    if isinstance(error, KeyboardInterrupt):  # Ctrl-C before the engine stopped at a step
        stopped = "Ctrl-C; its resume_command resumes from the last checkpoint"
        recorder.finish("interrupted", interrupted=stopped)
    elif isinstance(error, SystemExit):  # a signal (Slurm requeue, time limit), checkpointed
        recorder.finish("interrupted", interrupted=getattr(error, "reason", None))
    elif isinstance(error, (CheckpointError, RunStopped)):
        recorder.finish("failed", error=str(error))
        print(f"error: {error}", file=sys.stderr)
        raise Ended(1) from None
    else:
        launch = role.attempt if plan.dims.world_size > 1 else None
        if finish_crashed(recorder, error, role.rank, launch, logs):  # a full disk: one line
            raise SystemExit(1) from None
    raise error


def rank_logs(run_dir: Path, role: Role, job: dict[str, Any] | None) -> list[str]:
    """Where a rank's traceback is: its own log in the run directory, and Slurm's stderr of
    its task (`job`: its Slurm job's record)."""
    logs = [str(run_dir / f"{role.log_name(HydraConfig.get().job.name)}.log")]
    stderr = (job or {}).get("stderr")
    if stderr:
        logs.append(stderr)
    return logs


def report_failure(run_dir: Path, role: Role, error: BaseException) -> None:
    """A rank of a multi-rank launch that failed before its run started (its peers may be
    waiting for it in the rendezvous): its record, which their watchdogs read."""
    if role.attempt is not None:
        text = f"{type(error).__name__}: {error}"
        failures.write(run_dir, role.rank, text, rank_logs(run_dir, role, slurm.job_record(role)))
