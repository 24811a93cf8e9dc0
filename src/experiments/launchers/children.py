"""Runs that happen in other processes: torchrun's ranks, and each point of a local `-m`
sweep (a crashed or killed point must not take the sweep down with it).

The launching process plans the run, starts the children with this run's directory, lock
and command, waits, and reads back what rank 0 among them recorded; it records only what a
child could not (a child killed before it wrote anything).
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import subprocess
import sys
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from experiments import distributed_env
from experiments.composition import user_overrides
from experiments.run import failures, lock
from experiments.run.record import COMMAND_ENV, read_summary, user_command
from experiments.run.summary import record_failure

log = logging.getLogger("experiments.train")


def child_command(plan: Any) -> list[str] | None:
    """The command that runs this plan in child processes; None when it runs here (a rank,
    a plain local run, a Slurm task)."""
    if distributed_env.is_worker():
        return None
    launcher = plan.choices.get("launcher")
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *plan.launch_command[1:]]
    if launcher == "local" and HydraConfig.get().mode == RunMode.MULTIRUN:
        from experiments.launchers import local

        return local.child_command(user_overrides(plan.overrides), str(plan.run_dir))
    return None


def launch(plan: Any, command: list[str], warm_points: bool = False) -> float | None:
    """The children share this run directory; rank 0 among them writes the record. A local
    sweep's point runs in a fork of the sweep's warm process (launchers/warm_points.py)."""
    env = {**os.environ, distributed_env.WORKER_ENV: "1", COMMAND_ENV: user_command()}
    env.update(lock.child_env(plan.run_dir))  # they join this run's lock (run/lock.py)
    from experiments.launchers import local

    if plan.choices.get("launcher") == "local":
        env[local.SWEEP_POINT_ENV] = "1"  # Ctrl-C at the sweep stops it gracefully
    if plan.choices.get("launcher") == "torchrun":
        from experiments.launchers import torchrun

        env.update(torchrun.ENVIRONMENT)
    log.info("launching: %s", shlex.join(plan.launch_command))
    failures.clear(plan.run_dir)  # an earlier launch's failed ranks are not this one's
    from experiments.launchers import warm_points as warm

    returncode = None
    if warm_points and warm.available() and command[1:3] == ["-m", "experiments.train"]:
        argv = ["experiments-train", *command[3:]]
        returncode = warm.run_point(plan.engine, argv, env, os.getcwd())
    if returncode is None:  # cold: torchrun, warm points off, or no warm server
        returncode = subprocess.run(command, env=env, check=False).returncode
    summary = read_summary(plan.run_dir) or {}
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
        record_failure(plan.run_dir, plan.overrides, error)  # a killed child wrote nothing
        raise error
    from experiments.plan import objective_value

    return objective_value(plan, summary.get("metrics", {}))


def rank_logs(run_dir: Any, rank: int) -> list[str]:
    """Where a rank's traceback is: its own log in the run directory, and Slurm's stderr of
    its task."""
    logs = [str(run_dir / f"{HydraConfig.get().job.name}_rank{rank}.log")]
    if distributed_env.in_slurm_job():
        from experiments.launchers import slurm

        stderr = (slurm.job_record() or {}).get("stderr")
        if stderr:
            logs.append(stderr)
    return logs
