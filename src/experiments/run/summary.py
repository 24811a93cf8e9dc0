"""What summary.json holds when a run starts, and how its end is recorded when it is not a
clean finish (a failed sweep point, a full disk, a peer rank's failure). Apart from record.py
(how records are written) so the run's owner and the launchers that outlive it (a sweep's
login, Slurm's) record the same way. The command lines come from the launchers, which know
them (launchers/command.py)."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

from experiments.role import Kind, Role
from experiments.run import channel, failures
from experiments.run.record import (
    NoSpaceError,
    RunRecorder,
    git_commit,
    no_space,
    read_summary,
    versions,
    write_json_atomic,
)

log = logging.getLogger("experiments.train")


def record_extensions(plan: Any) -> dict[str, Any] | None:
    """The run's summary.json as it stands, with the extensions this launch makes to it
    (`plan.extensions`: a raised budget, another topology) recorded first, and the run no
    longer done. Written by the process that checked the launch, before any rank or job
    starts: a torchrun rank or a Slurm job plans against the config Hydra has already
    rewritten (and a sweep point's job does not compare it at all), so it carries the record
    on."""
    previous = read_summary(plan.run_dir)
    if previous and plan.extensions:
        previous["extensions"] = [*previous.get("extensions", []), *plan.extensions]
        previous["status"] = "running"
        write_json_atomic(plan.run_dir / "summary.json", previous)
        print(f"Extending {plan.run_dir}: {'; '.join(plan.extensions)}")
    return previous


# What summary.json copies from the plan (plan.as_dict()) when the run starts.
PLAN_FIELDS = (
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
    "neuron",
)


def start_record(
    plan: Any,
    role: Role,
    cwd: str,
    previous: dict[str, Any] | None,
    slurm: dict[str, Any] | None,
    commands: tuple[str, str],
) -> RunRecorder:
    """This rank's recorder as the run starts, its summary written (`start_summary`): it
    records on the rank whose record reaches the run directory (`role.records`), which
    writes it itself, or as one of torchrun's ranks through its owner's channel."""
    files = channel.to_owner(plan.run_dir) if role.kind is Kind.TORCHRUN_RANK else None
    summary = start_summary(plan, cwd, previous, slurm, commands)
    recorder = RunRecorder(plan.run_dir, summary, enabled=role.records, files=files)
    recorder.start()
    return recorder


def start_summary(
    plan: Any,
    cwd: str,
    previous: dict[str, Any] | None,
    slurm: dict[str, Any] | None,
    commands: tuple[str, str],
) -> dict[str, Any]:
    """summary.json as a run starts: the plan, the command, versions, code and counters
    carried over from the run's earlier launches; `slurm` is the job's record under Slurm;
    `commands`: the user's command and the one that continues the run."""
    described = plan.as_dict()
    summary = {key: described[key] for key in PLAN_FIELDS if key in described}
    summary.update(
        seed=plan.seed,
        # what the run returns to a sweep (objective=; a search is told these recorded values)
        objective=list(getattr(plan, "objectives", [plan.objective])),
        command=commands[0],
        resume_command=commands[1],
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
    if slurm is not None:
        summary["slurm"] = slurm
    return summary


def write_plan(plan: Any) -> Path:
    """plan.json in the run directory: the artefact every logger gets first."""
    plan_file = plan.run_dir / "plan.json"
    write_json_atomic(plan_file, plan.as_dict())
    return plan_file


def record_failure(run_dir: Path, overrides: list[str], error: BaseException) -> None:
    """summary.json says `failed` with the error (kept when it already says so: the run's
    own, more precise record wins)."""
    summary = read_summary(run_dir) or {"overrides": overrides}
    if summary.get("status") != "failed":
        summary.update(status="failed", error=f"{type(error).__name__}: {error}")
        write_json_atomic(run_dir / "summary.json", summary)


def finish_no_space(recorder: RunRecorder, full: NoSpaceError) -> None:
    """A full disk or quota: one line (the path, the bytes it needed), no traceback. The
    failed write left the previous checkpoint and records as they were; summary.json says
    `failed` if even that small write still fits."""
    print(f"{chr(10) if sys.stderr.isatty() else ''}error: {full}", file=sys.stderr)  # past a bar
    try:
        recorder.finish("failed", error=str(full))
    except NoSpaceError:
        print(f"  (summary.json could not be updated either: {_free(recorder)})", file=sys.stderr)


def _free(recorder: RunRecorder) -> str:
    try:
        return f"{shutil.disk_usage(recorder.run_dir).free} bytes free"
    except OSError as error:
        return str(error)


def finish_failed(recorder: RunRecorder, cause: dict[str, Any]) -> None:
    """Rank 0 records a multi-rank run's failure under the rank that caused it."""
    recorder.finish("failed", **failures.summary_fields(cause))


def finish_crashed(
    recorder: RunRecorder, error: BaseException, rank: int, attempt: str | None, logs: list[str]
) -> bool:
    """An exception out of the engine, recorded before it propagates: a full disk of a run of
    one process in one line (True: the caller exits 1 without a traceback); else the failure
    under the rank that caused it. `attempt`: the multi-rank launch this rank is part of
    (None for one process), where each failing rank reports its error and `logs`."""
    full = no_space(error)
    if full is not None and attempt is None:
        finish_no_space(recorder, full)
        return True
    log.error("run failed:\n%s", traceback.format_exc())
    text = f"{type(error).__name__}: {error}"
    if attempt is not None:
        own = failures.write(recorder.run_dir, rank, text, logs)
        if recorder.enabled:
            finish_failed(recorder, failures.wait_for_cause(recorder.run_dir, own))
    else:
        recorder.finish("failed", error=text)
    return False
