"""Runs that happen in other processes: torchrun's ranks, and each point of a local `-m`
sweep (a crashed or killed point must not take the sweep down with it).

torchrun's ranks are started by the run's owner, this process: it holds the run's lock, and
its rank 0 reports the record to it (run/channel.py). A local sweep's point is a run of its
own, whose process owns its directory. Either way the launching process waits, and records
only how the launch ended when its children could not (a child killed before it wrote it).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from typing import Any

from experiments.composition import user_overrides
from experiments.errors import ConfigError
from experiments.launchers.command import COMMAND_ENV, user_command
from experiments.role import Kind, Role, child_environment
from experiments.run import failures, lock
from experiments.run.channel import ADDRESS, RecordServer
from experiments.run.record import RecordFiles, read_summary
from experiments.run.summary import record_failure

log = logging.getLogger("experiments.train")


def launch_for(plan: Any, role: Role, config: dict[str, Any]) -> Launch | None:
    """How this process runs the plan when its role is to start others: torchrun's ranks
    (launched by the run's own process, or by a sweep's login for each point: the owner of
    that run while they run), or a local sweep's point (the sweep's login); None when it
    trains the plan itself (training.py)."""
    launcher = plan.choices.get("launcher")
    if role.kind in (Kind.RUN, Kind.SWEEP_LOGIN) and launcher == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", *plan.launch_command[1:]]
        return Launch(Kind.TORCHRUN_RANK, command)
    if role.kind is Kind.SWEEP_LOGIN and launcher == "local":
        from experiments.launchers import local

        command = local.child_command(user_overrides(plan.overrides), str(plan.run_dir))
        warm = bool((config.get("launcher") or {}).get("warm_points", False))
        return Launch(Kind.SWEEP_POINT, command, warm)
    return None


class Launch:
    """Children that run the plan: `kind`, started by `command`; a local sweep's point in a
    fork of the sweep's warm process when `warm` (launchers/warm_points.py)."""

    def __init__(self, kind: Kind, command: list[str], warm: bool = False) -> None:
        self.kind = kind
        self.command = command
        self.warm = warm

    def run(self, plan: Any, previous: dict[str, Any] | None) -> dict[str, Any] | None:
        """Start the children and wait: the run's metrics as recorded, None when it stopped
        after a checkpoint (the same command resumes it), or the error the launch ended with
        (`previous`: the record before the launch, which the children read themselves)."""
        env = {**os.environ, **child_environment(self.kind), COMMAND_ENV: user_command()}
        server = None
        if self.kind is Kind.TORCHRUN_RANK:
            from experiments.launchers import torchrun

            env.update(torchrun.ENVIRONMENT)
            env.update(lock.child_env(plan.run_dir))  # the key of the channel they report to
            server = _serve_the_record(plan)
        log.info("launching: %s", shlex.join(plan.launch_command))
        failures.clear(plan.run_dir)  # an earlier launch's failed ranks are not this one's
        try:
            returncode = self._start(plan, env)
        finally:
            if server is not None:
                server.close()
        if server is not None and server.summary is not None:
            summary = server.summary  # what its ranks reported, as written
        else:
            summary = read_summary(plan.run_dir) or {}
        return _outcome(plan, self.kind, returncode, summary, records=server is not None)

    def _start(self, plan: Any, env: dict[str, str]) -> int:
        from experiments.launchers import warm_points

        if self.warm and warm_points.available():
            argv = ["experiments-train", *self.command[3:]]
            returncode = warm_points.run_point(plan.engine, argv, env, os.getcwd())
            if returncode is not None:
                return returncode
        # cold: torchrun, warm points off, or no warm server
        return subprocess.run(self.command, env=env, check=False).returncode


def _serve_the_record(plan: Any) -> RecordServer | None:
    """The channel torchrun's rank 0 reports the record through, published in the lock
    record; None on the other nodes of a multi-node launch (they joined the owner's lock)."""
    from experiments.launchers import torchrun

    held = lock.held(plan.run_dir)
    if held is None or not held.first:
        return None
    nodes = torchrun.launch_token(plan) is not None  # several: reachable from the others
    server = RecordServer(RecordFiles(plan.run_dir), held.token, "0.0.0.0" if nodes else None)
    lock.publish(plan.run_dir, **{ADDRESS: server.address})
    return server


def _outcome(
    plan: Any, kind: Kind, returncode: int, summary: dict[str, Any], records: bool
) -> dict[str, Any] | None:
    """What the launch returns to its caller, from the record its children left; a failure
    they did not record is recorded here when this process may write the record: the owner
    of torchrun's ranks (`records`), or a sweep's login once its point's process is gone."""
    from experiments.launchers import local

    stopped = summary.get("status") == "interrupted" or (
        local.ctrl_c_received() and summary.get("status") != "failed"
    )
    if returncode != 0 and stopped:  # stopped after a checkpoint, or by Ctrl-C before one
        log.warning("%s interrupted: %s", plan.run_dir, summary.get("interrupted", "Ctrl-C"))
        return None  # the same command resumes it
    if kind is Kind.SWEEP_POINT and returncode == ConfigError.exit_code:
        # The point's process refused its directory (another run took it meanwhile): as the
        # login itself would have been, nothing is written into it.
        why = "refused by the point's own process (its error above); nothing was written"
        raise lock.RunDirRefused("hydra.run.dir", str(plan.run_dir), why)
    if returncode != 0:
        cause = failures.cause(failures.read(plan.run_dir))
        error = RuntimeError(
            summary.get("error")
            or (cause and failures.describe(cause))
            or f"{plan.launch_command[0]} exited with status "
            f"{returncode}; logs: {plan.run_dir}/train_rank*.log"
        )
        if records or kind is Kind.SWEEP_POINT:
            record_failure(plan.run_dir, plan.overrides, error)  # a killed child wrote nothing
        raise error
    return summary.get("metrics", {})
