"""A sweep directory of many points without training any: copies of one real run's records.

The source is `tests/data/recorded_point/`, the records (summary.json, metrics.jsonl,
steps.jsonl, .hydra/overrides.yaml) of a real 3-step `experiments-train` run on synthetic data.
Each copy gets a log-uniform learning rate, a seed and its own accuracy curve, so a report
over it has a continuous swept key, a categorical one and distinct learning curves.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

RECORDED_POINT = Path(__file__).resolve().parents[1] / "tests" / "data" / "recorded_point"
WIDTHS = ("16", "32", "64")


def make_sweep(dest: Path, points: int, seed: int = 0, source: Path = RECORDED_POINT) -> Path:
    """Write `points` run directories 0/ .. points-1/ under `dest`; returns `dest`.
    Point i has optimizer.lr log-uniform in [1e-5, 1e-1], model.width one of WIDTHS, a
    val_accuracy peaked near lr 3e-3, and about 2% of the points failed."""
    rng = random.Random(seed)
    summary = json.loads((source / "summary.json").read_text(encoding="utf-8"))
    epochs = [json.loads(line) for line in (source / "metrics.jsonl").read_text().splitlines()]
    steps = [json.loads(line) for line in (source / "steps.jsonl").read_text().splitlines()]
    base = [o for o in summary["overrides"] if not o.startswith(("optimizer.lr=", "model.width="))]
    dest.mkdir(parents=True, exist_ok=True)
    for number in range(points):
        lr = 10 ** rng.uniform(-5, -1)
        width = rng.choice(WIDTHS)
        overrides = [*base, f"optimizer.lr={lr:.6g}", f"model.width={width}"]
        final = max(0.0, min(1.0, 0.9 - 0.08 * (math.log10(lr) + 2.5) ** 2 + rng.gauss(0, 0.03)))
        run_dir = dest / str(number)
        (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
        (run_dir / ".hydra" / "overrides.yaml").write_text(
            "".join(f"- {o}\n" for o in overrides), encoding="utf-8"
        )
        records = [
            {**r, "val_accuracy": final * (i + 1) / len(epochs), "lr": lr}
            for i, r in enumerate(epochs)
        ]
        point = {**summary, "overrides": overrides, "run_dir": str(run_dir), "seed": number}
        point["metrics"] = {**summary["metrics"], "val_accuracy": final}
        if rng.random() < 0.02:
            point.update(status="failed", error="RuntimeError: a generated failure")
            point.pop("metrics")
        _write_lines(run_dir / "metrics.jsonl", records)
        _write_lines(
            run_dir / "steps.jsonl", [{**s, "loss": s["loss"] * (1 - final / 2)} for s in steps]
        )
        (run_dir / "summary.json").write_text(json.dumps(point, indent=2), encoding="utf-8")
    return dest


def _write_lines(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def copy_sweep(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest
