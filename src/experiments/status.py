"""experiments-status: where each point of a sweep (or one run) stands, in one table
(docs/launchers.md).

Read from the run directories (the truth every point writes from its own process or job),
submitted.json for points whose Slurm job has not started (no directory yet), and squeue for
points still queued or running. A record cut short or written by another version is that
point's problem (one line), never an error of the command. It writes nothing and exits 0
whatever the points' states, except where squeue was needed and did not answer: the table from
the run directories, one line saying so, exit 1. `--cancel` scancels the jobs of the points not
finished (running ones checkpoint, then `interrupted`) and records them in cancelled.json, so
those points show `cancelled` from then on.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from experiments import tool_cli
from experiments.families import for_summary
from experiments.run.record import read_json, read_records

COLUMNS = ("point", "state", "progress", "last loss", "objective", "note")
QUEUED = ("running", "starting")  # states whose Slurm job squeue is asked about
FINAL = ("completed", "failed", "pruned")  # a point in one of these has nothing to cancel
SUBMITTED = "submitted.json"  # written at submission by launchers/slurm_jobs.py
CANCELLED = "cancelled.json"
# Slurm job states of a job still in the queue (squeue -t's names, lower case).
ACTIVE = frozenset(
    {
        "pending",
        "running",
        "configuring",
        "completing",
        "suspended",
        "requeued",
        "requeue_hold",
        "requeue_fed",
        "resizing",
        "signaling",
        "stage_out",
        "stopped",
    }
)


def submitted(path: Path) -> dict[str, dict[str, Any]]:
    """The points a Slurm submission queued, by number: {"job_id", "overrides"}."""
    points = (read_json(path / SUBMITTED) or {}).get("points")
    return points if isinstance(points, dict) else {}


def submissions(path: Path) -> list[dict[str, Any]]:
    """Each submission to the sweep, oldest first: {"at", "command", "arrays", ...}."""
    found = (read_json(path / SUBMITTED) or {}).get("submissions")
    return found if isinstance(found, list) else []


def point_dirs(path: Path, points: dict[str, dict[str, Any]] | None = None) -> list[Path]:
    """The run directories under `path`: itself for one run, else its numbered points (those
    submitted whose job has not made its directory yet included; `points`: `submitted`)."""
    if (path / "summary.json").exists():
        return [path]
    names = {p.name for p in path.iterdir() if p.is_dir() and p.name.isdigit()}
    names |= {name for name in (submitted(path) if points is None else points) if name.isdigit()}
    return [path / name for name in sorted(names, key=int)]


def _last(records: list[dict[str, Any]], key: str) -> Any:
    for record in reversed(records):
        if isinstance(record, dict) and record.get(key) is not None:
            return record[key]
    return None


def _number(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


class SlurmNotAnswering(Exception):
    pass


def ask_squeue(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """Slurm's state and reason of each of these jobs still in its queue (array tasks one by
    one: -r), or SlurmNotAnswering with what was said."""
    if shutil.which("squeue") is None:
        raise SlurmNotAnswering("squeue not found on PATH (run on a Slurm login node)")
    try:
        done = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(job_ids)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SlurmNotAnswering(f"squeue: {error}") from None
    said = done.stderr.strip().splitlines()
    if done.returncode != 0 and not any("Invalid job id" in line for line in said):
        raise SlurmNotAnswering("squeue: " + (said[-1] if said else f"exit {done.returncode}"))
    found = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1].lower() in ACTIVE:  # (-j may list ended jobs too)
            found[parts[0]] = (parts[1].lower(), parts[2])
    return found


def live_jobs(jobs: list[str]) -> list[str]:
    """Those of `jobs` still queued or running (SlurmNotAnswering where squeue does not say)."""
    queue = ask_squeue(jobs) if jobs else {}
    return [job for job in jobs if job in queue]


def slurm_jobs(path: Path, job_ids: list[str]) -> list[Any]:
    """submitit's own objects for jobs recorded at submission: the first `state` read asks
    sacct once for all of them (submitit's SlurmInfoWatcher), `cancel()` runs scancel. (Their
    folder, as conf/launcher/slurm.yaml sets it, only places logs, which are not read here.)"""
    from submitit.slurm.slurm import SlurmJob

    return [SlurmJob(path / ".submitit" / "%j", job) for job in job_ids]


def slurm_accounting(path: Path, job_ids: list[str]) -> dict[str, str]:
    """Slurm accounting's word ("completed", "cancelled", ...) on jobs no longer in the queue,
    as submitit reads it; none for a job sacct does not know, or where sacct does not answer
    (a cluster without accounting: no error of this command, so nothing is printed)."""
    if not job_ids:
        return {}
    jobs = slurm_jobs(path, job_ids)  # (imports submitit, which configures its logger)
    with _silent_sacct():
        states = {job.job_id: job.state for job in jobs}
    return {job: state.split()[0].lower() for job, state in states.items() if state != "UNKNOWN"}


@contextlib.contextmanager
def _silent_sacct() -> Iterator[None]:
    """submitit warns of a failing sacct call on its logger, and sacct writes its own error to
    this process's stderr (file descriptor 2): both are dropped meanwhile."""
    submitit_log = logging.getLogger("submitit")
    level = submitit_log.level
    submitit_log.setLevel(logging.CRITICAL)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        submitit_log.setLevel(level)


def job_of(run_dir: Path, summary: dict[str, Any], points: dict[str, dict[str, Any]]) -> str:
    """The point's Slurm job: the one its record names, else the one it was submitted as
    (`points`: the sweep's `submitted`, read once per table)."""
    job = (summary.get("slurm") or {}).get("job_id")
    if job and (summary.get("slurm") or {}).get("array_job_id"):
        job = f"{summary['slurm']['array_job_id']}_{summary['slurm']['array_task_id']}"
    return str(job or points.get(run_dir.name, {}).get("job_id") or "")


def point_row(
    run_dir: Path,
    found: dict[str, Any],
    queue: dict[str, tuple[str, str]],
    accounted: dict[str, str] | None = None,
    cancelled: dict[str, Any] | None = None,
    points: dict[str, dict[str, Any]] | None = None,
) -> dict[str, str]:
    """One point's row from its records (`read_records`), Slurm's queue and accounting, and
    what experiments-status --cancel cancelled."""
    summary = found["summary"] or {}
    state = summary.get("status", "unreadable" if found["problems"] else "starting")
    job = job_of(run_dir, summary, points or {})
    if not run_dir.exists():
        state = "queued"  # submitted, its job not started (squeue says more below)
    if any(problem.startswith("written by") for problem in found["problems"]):
        state = "unreadable"  # another version's record: not read as if it were ours
    family = for_summary(summary)
    metrics = summary.get("metrics") or {}
    steps, epochs = found.get("steps") or [], found.get("metrics") or []
    step = _last(steps, "step") or _last(epochs, "step")
    epoch = _last(epochs, "epoch")
    parts = [f"step {step}"] if step is not None else []
    progress = " ".join([*parts, f"epoch {epoch}"] if epoch else parts)
    loss = _last(steps, "loss")
    if loss is None:
        loss = _last(epochs, "loss_gen") or _last(epochs, "train_loss")
    note = ""
    if state in (*QUEUED, "queued") and job in queue:
        slurm_state, reason = queue[job]
        if slurm_state == "pending":
            state, note = "requeued" if summary.get("resumes") else "pending", reason
        elif state == "queued":
            state, note = slurm_state, f"Slurm job {job}"
    elif state == "queued" and (accounted or {}).get(job):
        state, note = "ended", f"Slurm job {job}: {accounted[job]}, no record written"
    if cancelled and job in cancelled.get("jobs", []) and state not in FINAL:
        state, note = "cancelled", f"experiments-status --cancel at {cancelled.get('at')}"
        found = {**found, "problems": []}
    if state == "failed":
        note = str(summary.get("error") or "").splitlines()[0] if summary.get("error") else ""
    elif state in ("interrupted", "pruned"):
        note = str(summary.get("interrupted") or "")
    if found["problems"]:
        note = "; ".join(found["problems"])
    objective = metrics.get(family.objective) if state == "completed" else None
    return {
        "point": run_dir.name,
        "state": state,
        "progress": progress,
        "last loss": _number(loss),
        "objective": f"{family.objective}={_number(objective)}" if objective is not None else "",
        "note": note,
    }


def _records(run_dir: Path) -> dict[str, Any]:
    if not run_dir.exists():
        return {"summary": None, "problems": [], "steps": [], "metrics": []}
    return read_records(run_dir)


def unfinished_jobs(
    records: dict[Path, dict[str, Any]], points: dict[str, dict[str, Any]]
) -> list[str]:
    """The Slurm jobs of points not final yet (submitted, starting, running, interrupted)."""
    jobs = []
    for run_dir, found in records.items():
        summary = found["summary"] or {}
        job = job_of(run_dir, summary, points)
        if job and summary.get("status") not in FINAL:
            jobs.append(job)
    return jobs


def table(path: Path, problems: list[str] | None = None) -> str:
    """The table; where squeue was needed (points whose Slurm jobs are not finished) and did
    not answer, the states are the run directories' own and the reason goes to `problems`."""
    points = submitted(path)
    records = {run_dir: _records(run_dir) for run_dir in point_dirs(path, points)}
    jobs = unfinished_jobs(records, points)
    queue: dict[str, tuple[str, str]] = {}
    if jobs:  # one squeue call for the whole table
        try:
            queue = ask_squeue(jobs)
        except SlurmNotAnswering as error:
            if problems is not None:
                problems.append(str(error))
    unstarted = [job_of(d, {}, points) for d in records if not d.exists()]
    accounted = slurm_accounting(path, [j for j in unstarted if j and j not in queue])
    cancelled = read_json(path / CANCELLED) or {}
    rows = [
        point_row(run_dir, found, queue, accounted, cancelled, points)
        for run_dir, found in records.items()
    ]
    widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in COLUMNS[:-1]}
    lines = ["  ".join(c.ljust(widths.get(c, 0)) for c in COLUMNS).rstrip()]
    for row in rows:
        lines.append("  ".join(row[c].ljust(widths.get(c, 0)) for c in COLUMNS).rstrip())
    counts = Counter(row["state"] for row in rows)
    lines.append(
        f"{len(rows)} point(s): " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    )
    if list(records) == [path]:  # one run: the command that continues it, while it is unfinished
        summary = read_json(path / "summary.json") or {}
        if summary.get("status") != "completed" and summary.get("resume_command"):
            lines.append(f"resume (once stopped): {summary['resume_command']}")
    return "\n".join(lines)


def cancel(path: Path) -> str:
    """scancel the jobs of the points still queued or running, and record it (cancelled.json).
    SlurmNotAnswering when squeue or scancel do not answer: nothing is recorded then."""
    points = submitted(path)
    records = {run_dir: _records(run_dir) for run_dir in point_dirs(path, points)}
    live = live_jobs(unfinished_jobs(records, points))
    if not live:
        return f"nothing to cancel in {path}: no point's Slurm job is queued or running"
    if shutil.which("scancel") is None:
        raise SlurmNotAnswering("scancel not found on PATH")
    for job in slurm_jobs(path, live):
        try:
            job.cancel()  # scancel, whose own error (Slurm's reason) goes to stderr as it is
        except subprocess.CalledProcessError as error:
            raise SlurmNotAnswering(f"scancel {job.job_id}: exit {error.returncode}") from None
        except OSError as error:
            raise SlurmNotAnswering(f"scancel: {error}") from None
    record = read_json(path / CANCELLED) or {}
    stopped = [d.name for d in records if job_of(d, records[d]["summary"] or {}, points) in live]
    record = {
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "jobs": sorted({*record.get("jobs", []), *live}),
        "points": sorted({*record.get("points", []), *stopped}, key=int),
    }
    from experiments.run.record import write_json_atomic

    write_json_atomic(path / CANCELLED, record)
    return (
        f"cancelled {len(live)} Slurm job(s) ({' '.join(live)}) of point(s) {', '.join(stopped)}; "
        f"recorded in {path / CANCELLED}. Running points get SIGTERM (a checkpoint, then "
        "`interrupted`); the same sweep command continues them later."
    )


def main(argv: list[str] | None = None) -> None:
    parser = tool_cli.parser(
        "experiments-status",
        "Where each point of a sweep (or one run) stands: state, step, last loss, objective,\n"
        "problem; a run's line names the command that continues it.",
        [
            "experiments-status outputs/multiruns/optimizer.lr_1e-3_3e-3-1a2b3c4d",
            "experiments-status outputs/multiruns/optimizer.lr_1e-3_3e-3-1a2b3c4d --watch 10",
            "experiments-status outputs/multiruns/optimizer.lr_1e-3_3e-3-1a2b3c4d --cancel",
            "experiments-status outputs/runs/2026-12-06/10-00-00-000000",
        ],
        "Slurm did not answer",
    )
    parser.add_argument(
        "path",
        type=Path,
        metavar="SWEEP_DIR|RUN_DIR",
        help="a sweep directory (0/, 1/, ...) or a run's",
    )
    parser.add_argument("--watch", type=float, metavar="S", help="redraw every S seconds")
    parser.add_argument(
        "--cancel", action="store_true", help="scancel the points still queued or running"
    )
    args = parser.parse_args(argv)
    path = args.path
    if not path.is_dir():
        parser.error(f"no such directory: {path}")
    if not point_dirs(path):
        parser.error(
            f"{path} is neither a sweep directory (no 0/, 1/, ...) nor a run directory "
            "(no summary.json)"
        )
    if args.watch is not None and args.watch <= 0:
        parser.error(f"--watch {args.watch}: a number of seconds > 0, e.g. --watch 10")
    if args.cancel:
        try:
            print(cancel(path))
        except SlurmNotAnswering as error:
            print(f"error: Slurm did not answer ({error}); nothing was cancelled", file=sys.stderr)
            sys.exit(1)
        return
    while True:
        problems: list[str] = []
        shown = table(path, problems)
        said = (
            f"error: Slurm did not answer ({problems[0]}); the states above are the run "
            "directories' own"
            if problems
            else ""
        )
        if args.watch is None:
            print(shown)
            if said:
                print(said, file=sys.stderr)
                sys.exit(1)
            return
        shown += f"\n{said}" if said else ""
        print("\033[2J\033[H" + time.strftime("%H:%M:%S ") + str(path) + "\n" + shown, flush=True)
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            sys.exit(0)


if __name__ == "__main__":
    main()
