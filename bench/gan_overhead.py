"""Benchmark 2: steady-state iteration time of DCGAN on the digits data through
`experiments-train` vs. MMGen's `train_model` called directly (bench/baselines/gan_train_model.py)
on the exact config our run handed it (<run dir>/mmgen_config.py). Same recipe, batch, seed,
data and logging interval; no sample grids, no intermediate checkpoints and no final evaluation
in either arm; A/B alternated; medians."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, row, run, step_seconds, train

BENCHMARK = "2. GAN training overhead"
MEASURE = "step time ratio (ours / MMGen train_model)"
SIZE = {"scale": 32, "batch": 64}


def measure(iters: int, log_every: int, repeats: int) -> list[dict]:
    if importlib.util.find_spec("mmgen") is None:
        return [row(BENCHMARK, MEASURE, 0.0, "<= 1.03", None, "skipped: mmgen not installed")]
    ours, base = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for index in range(repeats):
            run_dir = train(
                [
                    "model=dcgan",
                    "data=digits",
                    f"model.scale={SIZE['scale']}",
                    f"model.batch_size={SIZE['batch']}",
                    f"model.iters={iters}",
                    f"model.log_interval={log_every}",
                    # larger than iters: no sample grids or intermediate checkpoints (the
                    # baseline runs the same dumped config, so both arms do the same work)
                    f"model.sample_interval={iters + 1}",
                    f"model.checkpoint_interval={iters + 1}",
                    "model.eval_images=0",  # skip the final SWD/MS-SSIM: not training
                ],
                root / f"ours{index}",
            )
            records = [
                json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            ]
            ours.append(step_seconds([(r["step"], r["time"]) for r in records]))
            out = root / f"base{index}.json"
            run(
                [
                    sys.executable,
                    str(REPO / "bench/baselines/gan_train_model.py"),
                    f"--config={root / 'ours0' / 'mmgen_config.py'}",
                    f"--log-every={log_every}",
                    f"--out={out}",
                ],
                REPO,
            )
            base.append(step_seconds([tuple(t) for t in json.loads(out.read_text())]))
    ratio = statistics.median(ours) / statistics.median(base)
    notes = (
        f"DCGAN {SIZE['scale']}px digits batch {SIZE['batch']}, {iters} iterations (timed "
        f"every {log_every}) x {repeats} alternating runs; median s/iteration ours "
        f"{statistics.median(ours):.4f}, train_model {statistics.median(base):.4f}"
    )
    return [row(BENCHMARK, MEASURE, ratio, "<= 1.03", ratio <= 1.03, notes)]


if __name__ == "__main__":
    print(json.dumps(measure(iters=12, log_every=2, repeats=1), indent=2))
