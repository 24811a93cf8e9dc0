"""Our overhead on SpikingJelly's own loop: images/s of one model through `experiments-train`
(trainer.engine=spikingjelly) and through SpikingJelly's `train_classification` called
directly with the same TrainingConfig (the one our plan hands the library), in one process.

The ratio ours / direct is our overhead (goal >= 0.98). Both figures are the library's own
`images_per_second` (its timed steps), so start-up is not in either.

SpikingJelly's distributed-training tutorial measures SEW-ResNet34 and Spikformer-S at T=4,
128x128 inputs, global batch 32, bf16 (269.0 and 270.1 images/s on one RTX 4090): `SETTING`.
On a machine without CUDA (bench.gpu_check --cpu-rehearsal) `TINY` is used and the direct
call runs under our CPU mapping of the library's CUDA names (engines/spikingjelly_cpu.py).

    python -m bench.gpu_throughput [--steps 100]       # needs CUDA
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import train

MODELS = {"sew_resnet34": ["model=sew_resnet34"], "spikformer_s": ["model=spikformer"]}
# SpikingJelly's published setting (its tutorial's table).
SETTING = [
    "trainer.engine=spikingjelly",
    "data=synthetic",
    "data.image_size=128",
    "data.val_size=64",
    "model.time_steps=4",
    "trainer.batch_size=32",
    "trainer.precision=bf16",
    "trainer.epochs=1",
    "trainer.checkpoint_interval=0",
    "logger=none",
]
# The same list at a CPU rehearsal's size (fp32: bf16 needs CUDA on the library's loop).
TINY = [
    "trainer.engine=spikingjelly",
    "data=synthetic",
    "data.image_size=16",
    "data.val_size=8",
    "model.time_steps=2",
    "trainer.batch_size=8",
    "trainer.epochs=1",
    "trainer.checkpoint_interval=0",
    "logger=none",
]


def setting(cuda: bool, steps: int) -> list[str]:
    base = SETTING if cuda else TINY
    batch = 32 if cuda else 8
    return [*base, f"trainer.max_steps={steps}", f"data.train_size={batch * steps}"]


def plan_of(overrides: list[str], run_dir: Path) -> Any:
    """Our plan for these overrides, built in this process as experiments-train builds it."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from experiments.plan import build_plan

    GlobalHydra.instance().clear()
    with initialize_config_module("experiments.conf", version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return build_plan(cfg, str(run_dir), overrides, dict(cfg.hydra.runtime.choices))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _one_rank(cuda: bool) -> Iterator[None]:
    """This process as the one rank of a run, as a user calling the library would set it up.
    On CUDA the library initialises NCCL itself (env://); on CPU ranks our engine's way:
    a gloo group first, and the CPU mapping of the library's CUDA names (its module's `torch`
    name and the globals it looks up), none of our loop hooks."""
    import torch.distributed as dist

    values = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        if cuda:
            yield
        else:
            from spikingjelly.activation_based.distributed.vision import training

            from experiments.snn.engines.spikingjelly_cpu import (
                CudaOnCPU,
                cpu_mapping,
                view_of_torch,
            )

            dist.init_process_group("gloo")
            library_torch = training.torch  # the module's own name, as our engine maps it
            training.torch = view_of_torch(CudaOnCPU(), on_cpu=True)
            try:
                with cpu_mapping():
                    yield
            finally:
                training.torch = library_torch
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def direct(overrides: list[str], run_dir: Path, cuda: bool) -> dict[str, Any]:
    """SpikingJelly's train_classification on our plan's TrainingConfig (no checkpoints)."""
    from spikingjelly.activation_based.distributed.vision import train_classification

    plan = plan_of(overrides, run_dir)
    config = dataclasses.replace(plan.training_config, checkpoint_dir=None)
    with _one_rank(cuda):
        return train_classification(config)


def compare(name: str, root: Path, cuda: bool, steps: int) -> dict[str, Any]:
    """One model's images/s both ways, and the ratio ours / direct."""
    overrides = [*MODELS[name], *setting(cuda, steps)]
    run_dir = train(overrides, root / f"{name}_ours")
    ours = json.loads((run_dir / "summary.json").read_text())
    library = direct(overrides, root / f"{name}_direct", cuda)
    ours_ips = float(ours["metrics"]["images_per_second"])
    direct_ips = float(library["images_per_second"])
    return {
        "ours_images_per_second": round(ours_ips, 2),
        "direct_images_per_second": round(direct_ips, 2),
        "ratio": round(ours_ips / direct_ips, 4) if direct_ips else None,
        "engine": ours.get("engine"),
        "device": ours.get("device"),
        "steps": steps,
        "overrides": overrides,
    }


def main() -> None:
    import tempfile

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench.gpu_throughput: no CUDA device here; run it on a GPU machine")
    results: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0)}
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            results[name] = compare(name, Path(tmp), cuda=True, steps=args.steps)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
