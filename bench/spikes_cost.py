"""What the spike and energy measurement costs (issue "What SNN papers report"): the main job
(`experiment=digits_sew_resnet18`, `logger=none`) with the measurement at its default
(trainer.spikes.images=auto: 32 validation images at each of its 4 evaluations) vs. off
(trainer.spikes.images=0), alternated (A B, B A, ...); wall time of the run (summary.json
wall_time_s) and its peak memory (peak_memory_mb: the process's peak RSS on CPU).
Target: with / without <= 1.05.

    python -m bench.spikes_cost [--repeats 3] [--out DIR]

Writes DIR/spikes_cost.json and prints the table. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.common import REPO, train

ARMS = {"with": [], "without": ["trainer.spikes.images=0"]}


def measure(repeats: int) -> dict:
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(repeats):
            for arm in list(ARMS)[:: 1 if index % 2 == 0 else -1]:
                run_dir = train(
                    ["experiment=digits_sew_resnet18", "logger=none", *ARMS[arm]],
                    Path(tmp) / f"{arm}{index}",
                )
                summary = json.loads((run_dir / "summary.json").read_text())
                runs[arm].append(
                    {
                        "wall_s": summary["wall_time_s"],
                        "peak_memory_mb": summary["metrics"]["peak_memory_mb"],
                        "val_accuracy": summary["metrics"]["val_accuracy"],
                    }
                )
    medians = {
        arm: {key: statistics.median(r[key] for r in rows) for key in ("wall_s", "peak_memory_mb")}
        for arm, rows in runs.items()
    }
    return {
        "runs": runs,
        "medians": medians,
        "time_ratio": medians["with"]["wall_s"] / medians["without"]["wall_s"],
        "memory_ratio": medians["with"]["peak_memory_mb"] / medians["without"]["peak_memory_mb"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench")
    args = parser.parse_args()
    result = measure(args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spikes_cost.json").write_text(json.dumps(result, indent=2))
    for arm, rows in result["runs"].items():
        print(
            arm,
            [(r["wall_s"], round(r["peak_memory_mb"]), round(r["val_accuracy"], 4)) for r in rows],
        )
    print(
        f"time with / without {result['time_ratio']:.3f}, peak memory {result['memory_ratio']:.3f}"
    )


if __name__ == "__main__":
    main()
