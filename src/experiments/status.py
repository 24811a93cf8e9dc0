"""experiments-status: where each point of a sweep (or one run) stands, in one table.

Read from the run directories (the truth every point writes from its own process or job) and,
for Slurm points still queued or running, from squeue where it answers: pending with Slurm's
reason, running at a step with its last loss, completed with the objective, failed with its
one-line error, interrupted, pruned. A record cut short or written by another version is that
point's problem (one line), never an error of the command (run/record.read_records). It
writes nothing and exits 0 whatever the points' states; `--watch S` redraws every S seconds.
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from experiments.families import for_summary
from experiments.run.record import read_records

COLUMNS = ("point", "state", "progress", "last loss", "objective", "note")
QUEUED = ("running",)  # states whose Slurm job squeue is asked about


def point_dirs(path: Path) -> list[Path]:
    """The run directories under `path`: itself for one run, else its numbered points."""
    if (path / "summary.json").exists():
        return [path]
    points = [p for p in path.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(points, key=lambda p: int(p.name))


def _last(records: list[dict[str, Any]], key: str) -> Any:
    for record in reversed(records):
        if isinstance(record, dict) and record.get(key) is not None:
            return record[key]
    return None


def _number(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


def _squeue(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """Slurm's state and reason of each job still in its queue ({} where squeue does not
    answer: no Slurm here, or the jobs left the queue)."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    try:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i|%T|%r", "-j", ",".join(job_ids)],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            found[parts[0]] = (parts[1].lower(), parts[2])
    return found


def point_row(
    run_dir: Path, found: dict[str, Any], queue: dict[str, tuple[str, str]]
) -> dict[str, str]:
    """One point's row from its records (`read_records`) and Slurm's queue."""
    summary = found["summary"] or {}
    state = summary.get("status", "unreadable" if found["problems"] else "starting")
    if any(problem.startswith("written by") for problem in found["problems"]):
        state = "unreadable"  # another version's record: not read as if it were ours
    family = for_summary(summary)
    metrics = summary.get("metrics") or {}
    steps, epochs = found.get("steps") or [], found.get("metrics") or []
    step = _last(steps, "step") or _last(epochs, "step")
    epoch = _last(epochs, "epoch")
    progress = " ".join(
        part
        for part in (f"step {step}" if step is not None else "", f"epoch {epoch}" if epoch else "")
        if part
    )
    loss = _last(steps, "loss")
    if loss is None:
        loss = _last(epochs, "loss_gen") or _last(epochs, "train_loss")
    note = ""
    job = str((summary.get("slurm") or {}).get("job_id") or "")
    if state in QUEUED and job in queue:
        slurm_state, reason = queue[job]
        if slurm_state == "pending":
            state, note = "requeued" if summary.get("resumes") else "pending", reason
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


def table(path: Path) -> str:
    records = {run_dir: read_records(run_dir) for run_dir in point_dirs(path)}
    jobs = []
    for found in records.values():
        summary = found["summary"] or {}
        job = (summary.get("slurm") or {}).get("job_id")
        if job and summary.get("status") in QUEUED:
            jobs.append(str(job))
    queue = _squeue(jobs)  # one squeue call for the whole table
    rows = [point_row(run_dir, found, queue) for run_dir, found in records.items()]
    widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in COLUMNS[:-1]}
    lines = ["  ".join(c.ljust(widths.get(c, 0)) for c in COLUMNS).rstrip()]
    for row in rows:
        lines.append("  ".join(row[c].ljust(widths.get(c, 0)) for c in COLUMNS).rstrip())
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    lines.append(
        f"{len(rows)} point(s): " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="experiments-status", description=__doc__)
    parser.add_argument("path", type=Path, help="a sweep directory (0/, 1/, ...) or a run's")
    parser.add_argument("--watch", type=float, metavar="S", help="redraw every S seconds")
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
    while True:
        shown = table(path)
        if args.watch is None:
            print(shown)
            return
        print("\033[2J\033[H" + time.strftime("%H:%M:%S ") + str(path) + "\n" + shown, flush=True)
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            sys.exit(0)


if __name__ == "__main__":
    main()
