"""Benchmark: does the input pipeline keep up with a GPU? Images (or event samples) per second
that ONE DataLoader worker delivers with a data option's full augmentation (read/decode +
every transform, no model), and what an event dataset's frame cache costs: the first build
integrates every sample, a second run reads the cache.

    python -m bench.input_pipeline data=cifar10                     # generated CIFAR-10 files
    python -m bench.input_pipeline experiment=<preset>              # a preset's recipe
    python -m bench.input_pipeline data=cifar10 data.root=/data/cifar   # your own files
    python -m bench.input_pipeline data=dvs128_gesture model.time_steps=16

Any `experiments-train` override composes the data option (Hydra, as a run does); without a
`data.root`, tiny files in the real on-disk format (tests/support/datasets.py) are generated
under a temporary folder: `--images` CIFAR images a class, `--samples`/`--events` event
samples a class and events a sample (real DVS128 Gesture samples hold ~10^5 events, CIFAR10-DVS
~2x10^5). Generated CIFAR files are read with torchvision's md5 check skipped (they cannot
match the real archive's). Timings are measured, never asserted: they go to BENCHMARKS.md with
the date and the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import row

EVENT_OPTIONS = ("dvs128_gesture", "cifar10_dvs", "n_mnist", "n_caltech101")
CIFAR_OPTIONS = ("cifar10", "cifar100")
# Spikformer's CIFAR-10 augmentation (recipes.md 1.1, ZK-Zhou/spikformer cifar10/cifar10.yml)
SPIKFORMER_CIFAR10 = [
    "data.augment.crop=random_resized_crop",
    "data.augment.scale=[1.0,1.0]",
    "data.augment.ratio=[1.0,1.0]",
    "data.augment.auto_augment=rand-m9-n1-mstd0.4-inc1",
    "data.augment.auto_augment_ops=[Equalize,Rotate,ShearX,TranslateXRel,TranslateYRel]",
    "data.augment.re_prob=0.25",
    "data.augment.interpolation=bicubic",
]
# Spikformer's CIFAR10-DVS augmentation (recipes.md 1.4): flip, then SNNAugmentWide
SPIKFORMER_DVS = ["data.augment={hflip:0.5,policy:snn_augment_wide}"]


def compose_data(overrides: list[str]) -> dict[str, Any]:
    """The data node a run with these overrides gets, resolved (the model's T included)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module("experiments.conf", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    data = OmegaConf.to_container(cfg.data, resolve=True)
    assert isinstance(data, dict)
    return data


def generate(data: dict[str, Any], folder: Path, images: int, samples: int, events: int) -> Path:
    """Files in the option's real on-disk format, for a benchmark without a data.root."""
    from tests.support.datasets import write_cifar, write_events

    name = str(data["name"])
    if name in CIFAR_OPTIONS:
        return write_cifar(folder / name, name, train_per_class=images, test_per_class=1)
    if name in EVENT_OPTIONS:
        return write_events(folder / name, name, per_class=samples, events=events, patch=None)
    if name == "imagefolder":
        return _jpeg_folder(folder / name, images)
    raise SystemExit(f"bench.input_pipeline: give data.root=... for data={name}")


def _jpeg_folder(root: Path, per_class: int, classes: int = 10) -> Path:
    """root/{train,val}/<class>/*.jpg: 500x375 JPEGs (ImageNet's typical size, quality 90) of
    smooth random colour fields (noise would decode slower than photographs do)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", per_class), ("val", 2)):
        for label in range(classes):
            folder = root / split / f"class{label:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                coarse = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
                image = Image.fromarray(coarse).resize((500, 375), Image.BICUBIC)
                image.save(folder / f"{index}.jpg", quality=90)
    return root


@contextlib.contextmanager
def md5_skipped(generated: bool) -> Iterator[None]:
    from tests.support.datasets import skip_cifar_md5

    with skip_cifar_md5() if generated else contextlib.nullcontext():
        yield


def build(data: dict[str, Any]) -> tuple[Any, Any, float]:
    """The builder's (train, validation) datasets, as every rank builds them, and seconds."""
    from omegaconf import OmegaConf

    from experiments.data import dataset_kwargs, import_object

    builder = import_object(str(data["builder"]), "data.builder")
    started = time.perf_counter()
    train, validation = builder(**dataset_kwargs(OmegaConf.create(data)))
    return train, validation, time.perf_counter() - started


def images_per_second(dataset: Any, workers: int, batch_size: int, batches: int) -> float:
    """Samples/s a DataLoader with `workers` worker processes delivers (after its first
    batch: the workers' start-up is not the steady rate), collated into batches."""
    import torch

    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
        generator=torch.Generator().manual_seed(0),
    )
    iterator = iter(loader)
    next(iterator)
    started = time.perf_counter()
    seen = 0
    for _ in range(batches):
        try:
            images, _ = next(iterator)
        except StopIteration:
            break
        seen += len(images)
    return seen / (time.perf_counter() - started)


def frame_cache_cost(data: dict[str, Any]) -> dict[str, float]:
    """Seconds to build the datasets with the frame cache absent (SpikingJelly integrates every
    sample) and present (it scans the cache), and the cache's size on disk."""
    import spikingjelly.datasets  # noqa: F401  (its import, ~1-3 s, is not the cache's cost)

    from experiments.data.event_layout import cache_folder

    root = Path(str(data["root"]))
    cache = cache_folder(root, int(data["frames_number"]), str(data["split_by"]))
    shutil.rmtree(cache, ignore_errors=True)
    _, _, first = build(data)
    _, _, second = build(data)
    files = [path for path in cache.rglob("*") if path.is_file()]
    return {
        "first_build_s": first,
        "second_build_s": second,
        "samples": len(files),
        "cache_mb": sum(path.stat().st_size for path in files) / 2**20,
    }


def measure(
    overrides: list[str],
    workers: tuple[int, ...] = (1, 2),
    batch_size: int = 64,
    batches: int = 20,
    generated: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One data option (with these overrides): its frame cache cost (event data) and its
    training set's images/s at each worker count."""
    data = compose_data(overrides)
    sizes = {"images": 500, "samples": 10, "events": 100_000, **(generated or {})}
    with tempfile.TemporaryDirectory(prefix="bench-input-") as folder:
        made = data.get("root") == "???"  # no data.root given: files generated here
        if made:
            data["root"] = str(generate(data, Path(folder), **sizes))
        result: dict[str, Any] = {"overrides": overrides, "generated": sizes if made else None}
        with md5_skipped(made):
            if data["name"] in EVENT_OPTIONS:
                result["frame_cache"] = frame_cache_cost(data)
            train, _, seconds = build(data)
            result["build_s"] = seconds
            result["train_samples"] = len(train)
            for count in workers:
                rate = images_per_second(train, count, batch_size, batches)
                result[f"images_per_s_{count}_workers"] = rate
                result[f"images_per_s_per_worker_{count}_workers"] = rate / max(1, count)
    return result


def measure_rows(quick: bool) -> list[dict]:
    """bench.run_all's rows: CIFAR-10 with its default and Spikformer's augmentation, and
    DVS128 Gesture frames (T=16, Spikformer's event augmentation) with the cache's cost."""
    batches = 2 if quick else 30
    # (files generated, batch): the DVS recipes train in batches of 16
    cifar = ({"images": 10}, 8) if quick else ({"images": 500}, 64)
    dvs = (
        ({"samples": 2, "events": 2_000}, 8) if quick else ({"samples": 10, "events": 100_000}, 16)
    )
    cases = {
        "cifar10, default augmentation": (["data=cifar10"], cifar),
        "cifar10, Spikformer's augmentation": (["data=cifar10", *SPIKFORMER_CIFAR10], cifar),
        "dvs128_gesture T=16, Spikformer's event augmentation": (
            ["data=dvs128_gesture", "model.time_steps=16", *SPIKFORMER_DVS],
            dvs,
        ),
    }
    rows = []
    for name, (overrides, (sizes, batch_size)) in cases.items():
        result = measure(overrides, (1,), batch_size, batches, sizes)
        note = f"{result['train_samples']} generated training samples"
        cache = result.get("frame_cache")
        if cache:
            note += (
                f"; frame cache: first build {cache['first_build_s']:.2f} s for "
                f"{cache['samples']} samples, second {cache['second_build_s']:.2f} s, "
                f"{cache['cache_mb']:.1f} MB"
            )
        rows.append(
            row(
                "Input pipeline",
                f"{name}: images/s per worker",
                result["images_per_s_per_worker_1_workers"],
                notes=note,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "overrides", nargs="*", help="experiments-train overrides, e.g. data=cifar10"
    )
    parser.add_argument("--workers", default="1,2", help="DataLoader worker counts to time")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=30, help="batches timed per worker count")
    parser.add_argument("--images", type=int, default=500, help="generated CIFAR images a class")
    parser.add_argument("--samples", type=int, default=10, help="generated event samples a class")
    parser.add_argument("--events", type=int, default=100_000, help="events a generated sample")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    result = measure(
        args.overrides,
        tuple(int(count) for count in args.workers.split(",")),
        args.batch_size,
        args.batches,
        {"images": args.images, "samples": args.samples, "events": args.events},
    )
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)
    print(f"(on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
