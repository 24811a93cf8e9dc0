"""What drawing spikes.png costs the run (issue "Simpler to read and change": the figure is
matplotlib's, drawn where its import costs the run nothing). Two arms on the same spikes.json
(the main job's shape: SEW-ResNet18's 17 spiking layers at 4 evaluations), alternated:

- in the run's own process: a fresh interpreter times `spikes_figure.draw` including
  matplotlib's import, what the run would wait if it drew the figure itself;
- the child (what runs do): `FigureProcess` asked at an evaluation, given the time a run's
  training gives it, asked again at the last evaluation and waited for at once: the seconds the
  run waits at its end (an upper bound: a run's last evaluation is followed by its last
  checkpoint and clean-up before it waits).

    python -m bench.spikes_figure [--repeats 5] [--out DIR]

Writes DIR/spikes_figure.json and prints the table. No timing is asserted anywhere.
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

LAYERS = 17  # SEW-ResNet18's spiking layers
EVALUATIONS = 4  # the main job's
IMPORT_HEAD_START_S = 8.0  # well under the main job's first epoch (~6-30 s)

IN_PROCESS = """
import sys, time
from pathlib import Path
started = time.perf_counter()
from experiments.snn.spikes_figure import draw
draw(Path(sys.argv[1]))
print(time.perf_counter() - started)
"""


def write_spikes(run_dir: Path) -> None:
    records = [
        {
            "step": 45 * (evaluation + 1),
            "layers": [
                {"layer": f"layer{index}.sn", "firing_rate": 0.02 + 0.01 * index}
                for index in range(LAYERS)
            ],
        }
        for evaluation in range(EVALUATIONS)
    ]
    (run_dir / "spikes.json").write_text(json.dumps({"evaluations": records}))


def in_process_seconds(run_dir: Path) -> float:
    done = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    )
    return float(done.stdout.strip().splitlines()[-1])


def child_wait_seconds(run_dir: Path) -> float:
    from experiments.snn.spikes_figure import FigureProcess

    child = FigureProcess()
    child.request(run_dir)  # an earlier evaluation's figure
    time.sleep(IMPORT_HEAD_START_S)  # the run trains meanwhile
    child.request(run_dir)  # the last evaluation's, asked right before the run ends
    started = time.perf_counter()
    drawn = child.finish(run_dir)
    waited = time.perf_counter() - started
    if drawn is None:
        raise RuntimeError("the figure child drew nothing")
    return waited


def measure(repeats: int) -> dict[str, float]:
    arms: dict[str, list[float]] = {"in_process": [], "child_wait": []}
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder)
        write_spikes(run_dir)
        for index in range(repeats):
            order = ["in_process", "child_wait"][:: 1 if index % 2 == 0 else -1]
            for arm in order:
                if arm == "in_process":
                    arms[arm].append(in_process_seconds(run_dir))
                else:
                    arms[arm].append(child_wait_seconds(run_dir))
    return {f"{arm}_median_s": statistics.median(values) for arm, values in arms.items()} | {
        "repeats": repeats,
        "load_average_1min": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench")
    args = parser.parse_args()
    result = measure(args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spikes_figure.json").write_text(json.dumps(result, indent=2))
    in_process, child_wait = result["in_process_median_s"], result["child_wait_median_s"]
    print("| arm | median seconds |\n|---|---|")
    print(f"| drawn in the run's own process (matplotlib imported) | {in_process:.3f} |")
    print(f"| drawn by the child started ahead (what the run waits) | {child_wait:.3f} |")


if __name__ == "__main__":
    main()
