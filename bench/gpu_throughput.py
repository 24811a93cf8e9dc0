"""Benchmark 5 (needs CUDA; for the device tool): single-GPU images/s of SEW-ResNet34 and
Spikformer through `experiments-train` vs. SpikingJelly's `train_classification` called
directly with the same TrainingConfig (taken from our dry run's JSON plan).

    python -m bench.gpu_throughput [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from bench.common import BIN, train

MODELS = {"sew_resnet34": ["model=sew_resnet34"], "spikformer": ["model=spikformer"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench.gpu_throughput: no CUDA device here; run it on a GPU machine")
    common = [
        "data=synthetic",
        "data.image_size=224",
        "data.train_size=20000",
        "data.val_size=256",
        "trainer.batch_size=64",
        "trainer.precision=bf16",
        "trainer.epochs=1",
        f"trainer.max_steps={args.steps}",
        "trainer.checkpoint_interval=0",
    ]
    results = {"gpu": torch.cuda.get_device_name(0)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in MODELS.items():
            run_dir = train([*extra, *common], Path(tmp) / name)
            ours = json.loads((run_dir / "summary.json").read_text())["metrics"]
            plan = json.loads(
                subprocess.run(
                    [str(BIN / "experiments-train"), *extra, *common, "dry_run=json"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            from spikingjelly.activation_based.distributed.vision import (
                TrainingConfig,
                train_classification,
            )

            config = TrainingConfig.from_dict(
                {**plan["library_config"], "checkpoint_dir": None, "checkpoint_interval": 0}
            )
            direct = train_classification(config)
            results[name] = {
                "ours_images_per_second": ours["images_per_second"],
                "direct_images_per_second": direct["images_per_second"],
                "ratio": direct["images_per_second"] / ours["images_per_second"],
            }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
