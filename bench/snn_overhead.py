"""Benchmark 1: what the framework costs per step on SpikingJelly's loop, at every logging
interval: steady-state seconds per step of `experiments-train` (SEW-ResNet34, T=2, 32 px,
batch 8, synthetic data, `logger=none`) vs. bench/baselines/snn_handwritten.py, a loop written
by hand around the same builder with the same data loading (SpikingJelly's loaders over the
same dataset), optimizer, seed and logging interval. Measured at `log_every_n_steps` 1 and 10;
runs alternated (A B, B A, ...); medians of the seconds between logged steps after warm-up.
Target <= 1.03 at both intervals."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, logged_times, row, run, step_seconds, train

BENCHMARK = "1. SNN training overhead"
SIZE = {"depth": 34, "batch": 8, "time_steps": 2, "image_size": 32}
QUICK = {"depth": 18, "batch": 8, "time_steps": 1, "image_size": 16}
INTERVALS = (1, 10)
TRAIN_SIZE = 4096


def _ours(size: dict, steps: int, every: int, run_dir: Path) -> float:
    train(
        [
            "data=synthetic",
            f"data.train_size={TRAIN_SIZE}",
            "data.val_size=64",
            f"data.image_size={size['image_size']}",
            f"model=sew_resnet{size['depth']}",
            f"model.time_steps={size['time_steps']}",
            f"trainer.batch_size={size['batch']}",
            "trainer.epochs=1",
            f"trainer.max_steps={steps}",
            "trainer.checkpoint_interval=0",
            f"trainer.log_every_n_steps={every}",
            "logger=none",
        ],
        run_dir,
    )
    return step_seconds(logged_times(run_dir), skip=_skip(every))


def _handwritten(size: dict, steps: int, every: int, out: Path) -> float:
    run(
        [
            sys.executable,
            str(REPO / "bench/baselines/snn_handwritten.py"),
            f"--steps={steps}",
            f"--depth={size['depth']}",
            f"--batch-size={size['batch']}",
            f"--time-steps={size['time_steps']}",
            f"--image-size={size['image_size']}",
            f"--train-size={TRAIN_SIZE}",
            f"--log-every={every}",
            f"--out={out}",
        ],
        REPO,
    )
    return step_seconds([tuple(t) for t in json.loads(out.read_text())], skip=_skip(every))


def _skip(every: int) -> int:
    """Warm-up gaps left out: the first steps' allocations, the first ten steps at least."""
    return max(1, 10 // every)


def measure(steps: int | None, repeats: int, quick: bool = False) -> list[dict]:
    """quick: the QUICK size. `steps` None: at each interval the fewest steps that log two
    timestamps (2 x the interval): one timed gap, no warm-up left out (step_seconds falls back
    to every gap), so the row is measured, not measured well (what --quick runs)."""
    size = QUICK if quick else SIZE
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for every in INTERVALS:
            n = 2 * every if steps is None else steps
            seconds: dict[str, list[float]] = {"ours": [], "handwritten": []}
            for index in range(repeats):
                for arm in ("ours", "handwritten")[:: 1 if index % 2 == 0 else -1]:
                    where = root / f"{arm}-{every}-{index}"
                    measured = (
                        _ours(size, n, every, where)
                        if arm == "ours"
                        else _handwritten(size, n, every, where.with_suffix(".json"))
                    )
                    seconds[arm].append(measured)
            ours, base = (statistics.median(seconds[arm]) for arm in ("ours", "handwritten"))
            ratio = ours / base
            notes = (
                f"SEW-ResNet{size['depth']} T={size['time_steps']} {size['image_size']}px batch "
                f"{size['batch']}, {n} steps x {repeats} alternating runs; median s/step ours "
                f"{ours:.4f}, hand-written {base:.4f}"
            )
            rows.append(
                row(
                    BENCHMARK,
                    f"step time ratio at log_every_n_steps={every} (ours / hand-written)",
                    ratio,
                    "<= 1.03",
                    ratio <= 1.03,
                    notes,
                )
            )
    return rows
