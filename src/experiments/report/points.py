"""A sweep's points, read from their run directories through an index that makes updates cheap.

A report is rebuilt after every point of a sweep, so reading all N points' records each time
would cost O(N) file parses per point and O(N^2) over the sweep. The index
(`<sweep>/.report_index.json`) keeps what the report needs of each point (its summary's
fields and overrides) with the sizes and mtimes of the files they came from. The update after
a point parses that point, points new to the index and unfinished ones; a full report
(`experiments-report`, the end of a sweep) stats every point and parses what changed. The
learning curves are read from the run directories when figures are drawn. The run
directories stay the truth: delete the index and the next report rebuilds it. Every file is
replaced atomically: Slurm jobs of one sweep update the report concurrently, and a reader
never sees half a file (a lost race costs at most a stale row until the next full report).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import sys
from pathlib import Path
from typing import Any

from experiments.run.record import METRICS, STEPS, atomically, read_json, read_jsonl, read_records

INDEX = ".report_index.json"
INDEX_VERSION = 4
LOGS = {  # the learning-curve columns a figure may need, for both model families
    "metrics.jsonl": ("epoch", "step", "val_accuracy", "loss_gen", "loss_disc"),
    "steps.jsonl": ("step", "loss"),
}
MAX_CURVE_POINTS = 200  # longer curves are down-sampled evenly (the last record always kept)
# failure: which rank of a multi-rank run failed, and its log (run/failures.py); interrupted:
# why a run stopped after a checkpoint without finishing.
SUMMARY_FIELDS = (
    "status",
    "engine",
    "metrics",
    "wall_time_s",
    "slurm",
    "seed",
    "error",
    "failure",
    "interrupted",
)
FINAL = ("completed", "failed")
# summary.json there but not readable (cut short by a crash, not JSON, a newer record format)
UNREADABLE = "unreadable"


class PointIndex:
    """The index of one sweep directory: read once, refreshed, saved if anything changed."""

    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = Path(sweep_dir)
        self.path = self.sweep_dir / INDEX
        self.data = _read_index(self.path)
        self.data.setdefault("points", {})
        self.dirty = False

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.dirty = True

    def refresh(self, changed: str | None = None) -> list[dict[str, Any]]:
        """Every point with a summary.json, in point order. `changed` names the one point
        known to have changed (a sweep's update after that point): then only it, points new
        to the index and points not yet finished are looked at; otherwise all are."""
        cached: dict[str, Any] = self.data["points"]
        fresh: dict[str, Any] = {}
        for name in sorted(_run_dir_names(self.sweep_dir), key=_point_order):
            entry = cached.get(name)
            if (
                changed is not None
                and entry is not None
                and name != changed
                and entry["summary"].get("status") in FINAL
            ):
                fresh[name] = entry
                continue
            run_dir = os.path.join(self.sweep_dir, name)
            stamp = _stamp(run_dir)
            if stamp is None:
                continue
            if entry is None or entry["stamp"] != stamp:
                entry = _read_point(run_dir, stamp)
                self.dirty = True
                if entry is None:
                    continue
            fresh[name] = entry
        if fresh.keys() != cached.keys():
            self.dirty = True
        self.data["points"] = fresh
        return [
            {**entry, "point": name, "run_dir": self.sweep_dir / name}
            for name, entry in fresh.items()
        ]

    def save(self) -> None:
        """Atomic: a Slurm job's report writer and the login process's may race; either
        wins, and the loser's points are picked up by the next refresh."""
        if not self.dirty:
            return
        with replacing(self.path) as temporary:
            temporary.write_text(json.dumps(self.data, separators=(",", ":")), encoding="utf-8")
        self.dirty = False


def replacing(path: Path) -> contextlib.AbstractContextManager[Path]:
    """`record.atomically` for the report's files: the temporary is named by this process
    (Slurm jobs of one sweep write the same files at once) and not fsynced (a report is
    rebuilt from the run directories)."""
    return atomically(path, path.with_name(f".{path.name}.{os.getpid()}.tmp"), fsync=False)


def save_png(figure: Any, path: Path) -> None:
    """A finished figure laid out, written through `replacing`, and closed."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    with replacing(path) as temporary:
        figure.savefig(temporary, format="png")
    plt.close(figure)


def write_table(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with (
        replacing(path) as temporary,
        open(temporary, "w", newline="", encoding="utf-8") as handle,
    ):
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def curve(run_dir: Path, log: str) -> dict[str, list[Any]]:
    """A run's log as columns (None where a record lacks one), down-sampled evenly. Read
    from the run directory when a figure is drawn, not kept in the index; a line being
    appended right now is skipped."""
    columns = LOGS[log]
    records = read_jsonl(run_dir / log)[0]
    if len(records) > MAX_CURVE_POINTS:
        stride = len(records) / MAX_CURVE_POINTS
        records = [records[int(i * stride)] for i in range(MAX_CURVE_POINTS - 1)] + records[-1:]
    return {
        column: [r.get(column) for r in records]
        for column in columns
        if any(column in r for r in records)
    }


def _run_dir_names(sweep_dir: Path) -> list[str]:
    with os.scandir(sweep_dir) as entries:
        return [e.name for e in entries if not e.name.startswith(".") and e.is_dir()]


def _point_order(name: str) -> tuple[int, str]:
    return (int(name), name) if name.isdigit() else (sys.maxsize, name)


def _stamp(run_dir: str) -> list[int] | None:
    """Size and mtime of the summary and the logs: any write to them changes it."""
    stamp: list[int] = []
    for name in ("summary.json", *LOGS):
        try:
            stat = os.stat(os.path.join(run_dir, name))
        except OSError:
            if name == "summary.json":
                return None
            stamp += [0, 0]
            continue
        stamp += [stat.st_size, stat.st_mtime_ns]
    return stamp


def _read_point(run_dir: str, stamp: list[int]) -> dict[str, Any] | None:
    """A point's index entry. A summary.json that cannot be read is the point's problem
    (status `unreadable`, one line in `problems`), never an error of the report. The logs
    of a finished point are checked too (a running one may be appending a line right now)."""
    found = read_records(Path(run_dir), logs=False)
    summary = found["summary"]
    problems: list[str] = list(found["problems"])
    if summary is None and not problems:
        return None  # gone between the stat and the read: the next update reads it
    if summary is not None and summary.get("status") in (*FINAL, "interrupted"):
        for name in (METRICS, STEPS):
            problem = read_jsonl(Path(run_dir) / name)[1]
            if problem:
                problems.append(problem)
    fields = {key: summary[key] for key in SUMMARY_FIELDS if key in summary} if summary else {}
    if summary is None or any(p.startswith("written by") for p in problems):
        fields["status"] = UNREADABLE
    overrides = (summary or {}).get("overrides") or _hydra_overrides(Path(run_dir))
    return {
        "stamp": stamp,
        "summary": fields,
        "overrides": dict(_split(o) for o in overrides if isinstance(o, str) and "=" in o),
        "problems": problems,
    }


def _hydra_overrides(run_dir: Path) -> list[str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return []
    import yaml

    try:
        return list(yaml.safe_load(path.read_text(encoding="utf-8")) or [])
    except (OSError, ValueError, TypeError, yaml.YAMLError):
        return []


def _split(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def _read_index(path: Path) -> dict[str, Any]:
    index = read_json(path) or {}
    return index if index.get("version") == INDEX_VERSION else {"version": INDEX_VERSION}


def planned_points(sweep_dir: Path) -> int | None:
    """How many points the sweep has in all, from the multirun.yaml Hydra wrote as it started:
    the basic sweeper's expansion, a search's n_trials; None when unknown (no such file)."""
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return None
    try:
        from omegaconf import OmegaConf

        from experiments.composition import sweep_points

        config = OmegaConf.load(path)
        points = sweep_points(config)
        if points is not None:
            return len(points)
        trials = OmegaConf.select(config, "hydra.sweeper.n_trials", default=None)
        return trials if isinstance(trials, int) else None
    except Exception:  # a file we cannot read says nothing about the points
        return None
