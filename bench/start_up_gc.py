"""What the lazier collector during start-up saves (src/experiments/garbage_collection.py): a
4-step single-process SEW-ResNet18 run as shipped vs. the same run under Python's own collector
from the package's import on (its thresholds put back, nothing frozen), alternated (A B, B A,
...), one thread a process. Both arms run the console script's entry point from the same
wrapper, which times each collection (gc.callbacks, the thread's CPU clock). Reported, medians:
the collector's CPU seconds and collections by generation, the process's CPU seconds and wall
time, and its peak memory (summary.json's peak_memory_mb: the peak RSS on CPU). The
collector's seconds are the figure to read: a run's CPU seconds vary by ~1 s from one run to
the next on a 2-core machine, more than the difference. No target: this is the measurement
BENCHMARKS.md quotes.

    python -m bench.start_up_gc [--repeats 5] [--out DIR]

Writes DIR/start_up_gc.json and prints the table. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO

RUN = [
    "trainer.epochs=1",
    "trainer.max_steps=4",
    "data=synthetic",
    "data.train_size=128",
    "data.val_size=64",
    "model.time_steps=2",
    "trainer.spikes.images=0",
    "logger=none",
]
# experiments-train's entry point, its collector timed; argv[1]: the arm, argv[2]: where the
# figures go, the rest the run's overrides.
WRAPPER = """
import atexit, gc, json, sys, time
arm, out = sys.argv[1:3]
spent, started, collections = [0.0], [0.0], [0, 0, 0]

def timed(phase, info):
    if phase == "start":
        started[0] = time.thread_time()
    else:
        spent[0] += time.thread_time() - started[0]
        collections[info["generation"]] += 1

gc.callbacks.append(timed)
cpu = time.process_time()

@atexit.register
def report():
    figures = {"gc_s": spent[0], "collections": collections, "cpu_s": time.process_time() - cpu}
    with open(out, "w") as handle:
        json.dump(figures, handle)

from experiments import garbage_collection
if arm == "pythons":  # Python's thresholds back at once, and nothing for the engine to end
    gc.set_threshold(*garbage_collection._python_thresholds)
    garbage_collection._python_thresholds = None
from experiments.train import main
sys.argv = ["experiments-train", *sys.argv[3:]]
main()
"""
ARMS = {"as shipped": "shipped", "Python's collector": "pythons"}


def _one_run(arm: str, run_dir: Path) -> dict[str, float]:
    figures = run_dir.parent / f"{run_dir.name}.json"
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, ARMS[arm], str(figures), *RUN, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{arm} failed:\n{proc.stderr[-3000:]}")
    measured = json.loads(figures.read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "gc_s": measured["gc_s"],
        "young_collections": measured["collections"][0],
        "middle_collections": measured["collections"][1],
        "full_collections": measured["collections"][2],
        "cpu_s": measured["cpu_s"],
        "wall_s": wall,
        "peak_memory_mb": summary["metrics"]["peak_memory_mb"],
    }


def measure(repeats: int) -> dict:
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(repeats):
            order = list(ARMS)[:: 1 if index % 2 == 0 else -1]
            for position, arm in enumerate(order):
                run_dir = Path(tmp) / f"run{index}-{position}"
                runs[arm].append(_one_run(arm, run_dir))
    medians = {
        arm: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for arm, rows in runs.items()
    }
    shipped, python = medians["as shipped"], medians["Python's collector"]
    return {
        "runs": runs,
        "medians": medians,
        "gc_ratio": shipped["gc_s"] / python["gc_s"],
        "cpu_ratio": shipped["cpu_s"] / python["cpu_s"],
        "memory_ratio": shipped["peak_memory_mb"] / python["peak_memory_mb"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench")
    args = parser.parse_args()
    result = measure(args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "start_up_gc.json").write_text(json.dumps(result, indent=2) + "\n")
    header = (
        "| arm | collector CPU s | collections (young, middle, full) | CPU s | wall s | peak MB |"
    )
    print(header)
    print("|---|---|---|---|---|---|")
    for arm, median in result["medians"].items():
        collections = (
            f"{median['young_collections']:.0f}, {median['middle_collections']:.0f}, "
            f"{median['full_collections']:.0f}"
        )
        print(
            f"| {arm} | {median['gc_s']:.2f} | {collections} | {median['cpu_s']:.2f} | "
            f"{median['wall_s']:.2f} | {median['peak_memory_mb']:.0f} |"
        )
    print(
        f"as shipped / Python's collector, medians of {args.repeats}: collector CPU "
        f"{result['gc_ratio']:.3f}, process CPU {result['cpu_ratio']:.3f}, peak memory "
        f"{result['memory_ratio']:.3f}"
    )


if __name__ == "__main__":
    main()
