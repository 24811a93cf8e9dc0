"""Shared pieces of the benchmarks: run a command, read step timestamps, take medians."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


def run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 1800) -> float:
    """Wall time of a command that must succeed."""
    started = time.perf_counter()
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {})},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def train(args: list[str], run_dir: Path, **kwargs) -> Path:
    run(
        [str(BIN / "experiments-train"), *args, f"hydra.run.dir={run_dir}"],
        run_dir.parent,
        **kwargs,
    )
    return run_dir


def step_seconds(timestamps: list[tuple[int, float]], skip: int = 2) -> float:
    """Median seconds per step between logged (step, time) pairs, after `skip` warm-up gaps."""
    gaps = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in itertools.pairwise(timestamps)]
    gaps = gaps[skip:] or gaps
    return statistics.median(gaps)


def logged_times(run_dir: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    return [(r["step"], r["time"]) for r in records]


def row(
    benchmark: str,
    measure: str,
    value: float,
    target: str = "",
    ok: bool | None = None,
    notes: str = "",
) -> dict:
    return {
        "benchmark": benchmark,
        "measure": measure,
        "value": round(value, 4),
        "target": target,
        "ok": ok,
        "notes": notes,
    }
