"""Benchmark 1: steady-state step time of SEW-ResNet18 through `experiments-train` vs. a
hand-written loop around SpikingJelly's builder (bench/baselines/snn_handwritten.py).
Same model, batch, time steps, data and logging interval; A/B alternated; medians."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, logged_times, row, run, step_seconds, train

SIZE = {"batch": 16, "time_steps": 2, "image_size": 16}


def measure(steps: int, repeats: int) -> list[dict]:
    ours, base = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for index in range(repeats):
            run_dir = train(
                [
                    "data=synthetic",
                    "data.train_size=4096",
                    "data.val_size=64",
                    f"data.image_size={SIZE['image_size']}",
                    f"model.time_steps={SIZE['time_steps']}",
                    f"trainer.batch_size={SIZE['batch']}",
                    "trainer.epochs=1",
                    f"trainer.max_steps={steps}",
                    "trainer.checkpoint_interval=0",
                    f"trainer.log_every_n_steps={max(1, min(10, steps // 6))}",
                ],
                root / f"ours{index}",
            )
            ours.append(step_seconds(logged_times(run_dir)))
            out = root / f"base{index}.json"
            run(
                [
                    sys.executable,
                    str(REPO / "bench/baselines/snn_handwritten.py"),
                    f"--steps={steps}",
                    f"--batch-size={SIZE['batch']}",
                    f"--time-steps={SIZE['time_steps']}",
                    f"--image-size={SIZE['image_size']}",
                    f"--log-every={max(1, min(10, steps // 6))}",
                    f"--out={out}",
                ],
                REPO,
            )
            base.append(step_seconds([tuple(t) for t in json.loads(out.read_text())]))
    ratio = statistics.median(ours) / statistics.median(base)
    notes = (
        f"SEW-ResNet18 T={SIZE['time_steps']} {SIZE['image_size']}px batch {SIZE['batch']}, "
        f"{steps} steps x {repeats} alternating runs; median s/step ours "
        f"{statistics.median(ours):.4f}, hand-written {statistics.median(base):.4f}"
    )
    return [
        row(
            "1. SNN training overhead",
            "step time ratio (ours / hand-written)",
            ratio,
            "<= 1.03",
            ratio <= 1.03,
            notes,
        )
    ]
