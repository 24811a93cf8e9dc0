"""Benchmark 6: sweeps at search scale.

Report: `experiments-report` on generated sweep directories of 10, 100 and 1000 points
(copies of a real run's records, bench/sweep_records.py; a fresh directory, so the index is
built from nothing), and the in-process update the sweep callbacks run after each point, at
the same sizes. From the updates, the whole reporting cost of a 1000-point sweep.

Per-point overhead of a local -m sweep: sweeps of `small` and `large` tiny points; the
marginal wall time of a point minus the time the point itself recorded (its wall_time_s),
with the warm worker (launcher.warm_points=true, the default) and cold (false), against a
bare `python -c "import torch"`.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import BIN, row, run
from bench.sweep_records import make_sweep

SIZES = (10, 100, 1000)
POINT = [  # a tiny SNN point: 1 step of 16 synthetic images
    "data=synthetic",
    "data.train_size=16",
    "data.val_size=16",
    "model.time_steps=2",
    "trainer.batch_size=16",
    "trainer.epochs=1",
    "trainer.log_every_n_steps=1",
]
BEFORE = "before (figures each time, every record re-read): 1.09 / 2.37 / 15.46 s"


def measure(quick: bool) -> list[dict]:
    """quick: the report rows at 1000 points only (their measure's size; 10 and 100 run the
    same code), and no sweeps (see _overhead_rows)."""
    return [*_report_rows((1000,) if quick else SIZES), *_overhead_rows(quick)]


def _report_rows(sizes: tuple[int, ...]) -> list[dict]:
    from experiments.report import FIGURE_INTERVAL_S, update_report

    cli: dict[int, float] = {}
    update_ms: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            sweep = make_sweep(Path(tmp) / f"cli{size}", size)
            started = time.perf_counter()
            _report_cli(sweep)
            cli[size] = time.perf_counter() - started
            times = []
            for number in range(size - 5, size):  # the last 5 points "finish" one by one
                started = time.perf_counter()
                update_report(sweep, point=str(number))
                times.append(time.perf_counter() - started)
            update_ms[size] = 1000 * statistics.median(times)
    # A 1000-point sweep: one update per point (linear between the measured sizes), plus a
    # figure drawing at most every FIGURE_INTERVAL_S (one per point for points that fast).
    total_updates = sum(_interpolate(update_ms, n) for n in range(1, 1001)) / 1000
    at = " / ".join(str(size) for size in sizes)
    return [
        row(
            "6. Sweeps at scale",
            "experiments-report at 1000 points (s)",
            cli[1000],
            "<= 5",
            cli[1000] <= 5,
            f"{at} points: {' / '.join(f'{cli[n]:.2f}' for n in sizes)} s; " + BEFORE,
        ),
        row(
            "6. Sweeps at scale",
            "report update after a point at 1000 points (ms)",
            update_ms[1000],
            notes=f"{at} points: {' / '.join(f'{update_ms[n]:.1f}' for n in sizes)} ms (tables;"
            f" figures at most every {FIGURE_INTERVAL_S:.0f} s); all 1000 updates of a "
            f"1000-point sweep: {total_updates:.0f} s",
        ),
    ]


def _report_cli(sweep: Path) -> None:
    """`experiments-report` exits 1 on a sweep with failed points (the generated ones have
    some): time it without treating that as a failure."""
    import subprocess

    proc = subprocess.run(
        [str(BIN / "experiments-report"), str(sweep)], capture_output=True, text=True
    )
    if proc.returncode not in (0, 1) or "points" not in proc.stdout:
        raise RuntimeError(f"experiments-report failed:\n{proc.stderr[-3000:]}")


def _interpolate(measured: dict[int, float], n: int) -> float:
    sizes = sorted(measured)
    for low, high in itertools.pairwise(sizes):
        if n <= high:
            weight = max(0.0, (n - low) / (high - low))
            return measured[low] + weight * (measured[high] - measured[low])
    return measured[sizes[-1]]


def _overhead_rows(quick: bool) -> list[dict]:
    if quick:  # two sweeps per arm: below the noise at tiny sizes, and ~25 s of the suite
        return [
            row(
                "6. Sweeps at scale",
                "per-point overhead of a local sweep / import torch",
                0.0,
                "<= 1.5",
                notes="skipped: --quick (sweeps of 2 and 6 points, warm and cold: make bench)",
            )
        ]
    small, large = 2, 6
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        torch_s = statistics.median(
            run([sys.executable, "-c", "import torch"], cwd) for _ in range(3)
        )
        warm = _per_point(cwd, small, large, warm=True)
        cold = _per_point(cwd, small, large, warm=False)
    ratio = warm / torch_s
    notes = f"per point: warm {warm:.2f} s, cold {cold:.2f} s"
    notes += f"; python -c 'import torch' {torch_s:.2f} s; sweeps of {small} and {large} points"
    return [
        row(
            "6. Sweeps at scale",
            "per-point overhead of a local sweep / import torch",
            ratio,
            "<= 1.5",
            ratio <= 1.5,
            notes,
        )
    ]


def _per_point(cwd: Path, small: int, large: int, warm: bool) -> float:
    """Marginal wall time of a point minus the time the point recorded for itself."""
    walls, recorded = {}, []
    for size in (small, large):
        seeds = ",".join(str(s) for s in range(size))
        sweep = cwd / f"{'warm' if warm else 'cold'}{size}"
        args = [*POINT, f"seed={seeds}", f"launcher.warm_points={str(warm).lower()}"]
        walls[size] = run(
            [str(BIN / "experiments-train"), "-m", *args, f"hydra.sweep.dir={sweep}"], cwd
        )
        if size == large:
            recorded = [
                json.loads(p.read_text())["wall_time_s"] for p in sweep.glob("*/summary.json")
            ]
    return (walls[large] - walls[small]) / (large - small) - statistics.mean(recorded)
