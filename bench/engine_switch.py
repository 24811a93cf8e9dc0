"""The main job on SpikingJelly's loop vs the same job on the CPU engine it replaced, in one
run: the issue "One SNN engine" asks for the new engine at >= 0.95 of the old one's speed.

The old engine lives in an earlier checkout (its own .venv, e.g. a clone of the commit
before the switch, set up by `make setup`); the new one is this checkout's. The two are run
alternately (A B B A ...), `experiments-train experiment=digits_sew_resnet18` with the old
checkout's `trainer.engine=cpu`, and each run's training speed is read from its records:
seconds per optimizer step between the first and last logged steps of steps.jsonl
(steps 10..180: start-up and the first steps' warm-up left out), and wall seconds.

    python -m bench.engine_switch --baseline /path/to/old/checkout [--repeats 3] [--out DIR]

Writes DIR/engine_switch.json and prints the table. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import REPO

MAIN_JOB = ["experiment=digits_sew_resnet18", "logger=none"]


def run_once(checkout: Path, extra: list[str], run_dir: Path) -> dict[str, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [
            str(checkout / ".venv" / "bin" / "experiments-train"),
            *MAIN_JOB,
            *extra,
            f"hydra.run.dir={run_dir}",
        ],
        cwd=run_dir.parent,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: {done.stderr[-3000:]}")
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    first, last = steps[0], steps[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "seconds_per_step": (last["time"] - first["time"]) / (last["step"] - first["step"]),
        "wall_s": wall,
        "val_accuracy": summary["metrics"]["val_accuracy"],
        "engine": summary["engine"],
    }


def measure(baseline: Path, repeats: int) -> dict:
    arms = {"old": (baseline, ["trainer.engine=cpu"]), "new": (REPO, [])}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(repeats):
            order = ("old", "new") if index % 2 == 0 else ("new", "old")
            for name in order:
                checkout, extra = arms[name]
                run_dir = Path(tmp) / f"{name}{index}"
                results[name].append(run_once(checkout, extra, run_dir))
    medians = {
        name: {
            key: statistics.median(r[key] for r in runs) for key in ("seconds_per_step", "wall_s")
        }
        for name, runs in results.items()
    }
    return {
        "runs": results,
        "medians": medians,
        # speed of the new engine as a fraction of the old one's (>= 0.95 asked)
        "speed_ratio": medians["old"]["seconds_per_step"] / medians["new"]["seconds_per_step"],
        "wall_ratio": medians["old"]["wall_s"] / medians["new"]["wall_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench")
    args = parser.parse_args()
    result = measure(args.baseline, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engine_switch.json").write_text(json.dumps(result, indent=2))
    for name, runs in result["runs"].items():
        print(
            name,
            [
                (
                    round(r["seconds_per_step"], 4),
                    round(r["wall_s"], 1),
                    round(r["val_accuracy"], 4),
                    r["engine"],
                )
                for r in runs
            ],
        )
    ratios = f"{result['speed_ratio']:.3f} (steps), {result['wall_ratio']:.3f} (wall)"
    print(f"speed ratio new/old {ratios}")


if __name__ == "__main__":
    main()
