"""`experiments-sample`: a GAN checkpoint's images as a PNG grid (and an .npz); see PARSER.

The model is rebuilt as `experiments-eval` rebuilds it (gan/evaluate.py) and drawn through
MMGen's `sample_from_noise`, as MMGen's sample tools do, with seeded noise: one seed gives the
same PNG bytes every time. Every argument is checked before anything is written.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments import tool_cli
from experiments.errors import ConfigError, exit_in_one_line
from experiments.run.record import atomically

PARSER = tool_cli.parser(
    "experiments-sample",
    "Draws images from a GAN run's checkpoint (a run directory: its newest readable one) with\n"
    "MMGen's sampling API and writes a PNG grid, by default\n"
    "<run dir>/samples/iter_<N>_seed_<S>_num_<K>.png. The same seed gives the same images.",
    [
        "experiments-sample RUN_DIR",
        "experiments-sample RUN_DIR --num 16 --seed 3 --out grid.png",
        "experiments-sample BIGGAN_RUN_DIR --class 3 --num 8    # every image of class 3",
        "experiments-sample model.pt --npz                      # an exported generator",
    ],
    "the run has no readable checkpoint",
)
PARSER.add_argument(
    "target",
    metavar="RUN_DIR|CHECKPOINT",
    help="a GAN run directory, a checkpoint in one, or an exported generator",
)
PARSER.add_argument(
    "--num",
    type=tool_cli.at_least(1),
    default=64,
    metavar="N",
    help="images to draw (default 64); a class-conditional model draws one row per class, "
    "ceil(N / classes) a row, unless --class is given",
)
PARSER.add_argument(
    "--class",
    dest="label",
    type=tool_cli.at_least(0),
    metavar="N",
    help="a class-conditional model only: every image of class N",
)
PARSER.add_argument(
    "--seed", type=tool_cli.at_least(0), default=0, metavar="N", help="the noise seed (default 0)"
)
PARSER.add_argument(
    "--ema",
    action=argparse.BooleanOptionalAction,
    default=None,
    help="the EMA generator (the default where the recipe trains one) or the raw one",
)
PARSER.add_argument(
    "--npz",
    action="store_true",
    help="also <out>.npz with the images (uint8, N x H x W x C, RGB) and labels",
)
PARSER.add_argument("--out", metavar="FILE.png", help="the PNG file to write")
SAMPLES_DIR = "samples"  # <run dir>/samples/: ours; MMGen's hook writes training_samples/
BATCH = 64  # images per sample_from_noise call (a fixed size: the draws do not depend on num)


@dataclass(frozen=True)
class Request:
    """The command line, checked."""

    target: str
    num: int = 64
    label: int | None = None
    seed: int = 0
    ema: bool | None = None  # None: the EMA generator where the model has one
    npz: bool = False
    out: Path | None = None


def parse(argv: list[str]) -> Request:
    args = PARSER.parse_args(argv)
    out = None
    if args.out is not None:
        out = Path(args.out).expanduser()
        if out.suffix.lower() != ".png" or out.is_dir():
            PARSER.error(f"--out {args.out}: a file name ending in .png")
        out = out.absolute()
    return Request(args.target, args.num, args.label, args.seed, args.ema, args.npz, out)


def generator_kwargs(model: Any, request: Request) -> tuple[dict[str, Any], str]:
    """sample_from_noise's `sample_model` for the generator asked for (MMGen's default,
    'ema/orig', would return the EMA images followed by the raw ones)."""
    from experiments.gan import conditional

    try:
        kwargs = conditional.sample_kwargs(model, request.ema)
    except ValueError as error:  # ema=true, and the recipe trains no EMA generator
        raise ConfigError("--ema", None, f"--no-ema or left out: {error}") from None
    return kwargs, "ema" if kwargs.get("sample_model") == "ema" else "generator"


def labels_for(model: Any, request: Request, recipe: str) -> tuple[torch.Tensor | None, int]:
    """(labels of the images, images per grid row)."""
    from experiments.gan import conditional

    classes = conditional.num_classes(model)
    square = math.ceil(math.sqrt(request.num))
    if request.label is not None:
        if not classes:
            raise ConfigError(
                "--class",
                request.label,
                f"left out: {recipe} is not class-conditional ({type(model).__name__} draws "
                "from noise alone)",
            )
        if request.label >= classes:
            raise ConfigError("--class", request.label, f"a class of the model: 0..{classes - 1}")
        return torch.full((request.num,), request.label, dtype=torch.long), square
    if not classes:
        return None, square
    per_class = math.ceil(request.num / classes)
    return conditional.class_rows(classes, per_class), per_class


@torch.no_grad()
def draw(model: Any, count: int, seed: int, kwargs: dict[str, Any], labels: Any) -> torch.Tensor:
    """`count` images from MMGen's sample_from_noise, BATCH at a time, seeded."""
    from experiments.gan.quality import seeded

    batches = []
    with seeded(seed):
        for start in range(0, count, BATCH):
            size = min(BATCH, count - start)
            extra = dict(kwargs)
            if labels is not None:
                extra["label"] = labels[start : start + size]
            images = model.sample_from_noise(None, num_batches=size, **extra)
            if isinstance(images, dict):  # generators asked to return their noise too
                images = images["fake_img"]
            batches.append(images.cpu())
    return torch.cat(batches)


def as_uint8(images: torch.Tensor) -> np.ndarray:
    """N x H x W x C uint8 in RGB order, the pixels the PNG shows (MMGen trains on BGR)."""
    pixels = ((images + 1) / 2).clamp(0, 1)
    if pixels.shape[1] == 3:
        pixels = pixels[:, [2, 1, 0]]
    return (pixels * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def write_grid(pixels: np.ndarray, per_row: int, path: Path) -> None:
    """The uint8 images as one grid PNG (no padding, like the run's training grids)."""
    from PIL import Image

    count, height, width, channels = pixels.shape
    rows = math.ceil(count / per_row)
    grid = np.zeros((rows * height, per_row * width, channels), dtype=np.uint8)
    for index, image in enumerate(pixels):
        row, column = divmod(index, per_row)
        grid[row * height : (row + 1) * height, column * width : (column + 1) * width] = image
    mode = "L" if channels == 1 else "RGB"
    image = Image.fromarray(grid[..., 0] if channels == 1 else grid, mode=mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomically(path, fsync=False) as temporary:
        image.save(temporary, format="PNG")


def sample(argv: list[str]) -> int:
    request = parse(argv)
    from experiments.evaluate import find_target
    from experiments.gan.evaluate import checkpoint_or_export, recorded_plan

    target = find_target(request.target)
    if target.summary.get("engine") != "mmgen":
        raise ConfigError(
            "run",
            request.target,
            f"a GAN run (engine mmgen); {target.run_dir} is a run of engine "
            f"{target.summary.get('engine')}",
        )
    plan = recorded_plan(target.run_dir, [])
    checkpoint, model, iteration = checkpoint_or_export(plan, target.run_dir, target.checkpoint)
    _check_export_generator(checkpoint, request)
    kwargs, generator = generator_kwargs(model, request)
    labels, per_row = labels_for(model, request, plan.recipe.recipe)
    count = request.num if labels is None else len(labels)
    out = request.out or _default_out(target.run_dir, iteration, request, generator, model)

    images = draw(model, count, request.seed, kwargs, labels)
    pixels = as_uint8(images)
    write_grid(pixels, per_row, out)
    layout = (
        f"one row per class, {per_row} a row"
        if labels is not None and request.label is None
        else f"{per_row} a row"
    )
    print(
        f"wrote {out}: {count} images ({layout}) of {checkpoint} (iteration {iteration}, "
        f"{generator}, seed {request.seed}"
        + (f", class {request.label}" if request.label is not None else "")
        + ")"
    )
    if request.npz:
        arrays: dict[str, np.ndarray] = {"images": pixels}
        if labels is not None:
            arrays["labels"] = labels.numpy()
        npz = out.with_suffix(".npz")
        with atomically(npz, npz.with_name(f".{npz.stem}.tmp.npz"), fsync=False) as temporary:
            np.savez(temporary, **arrays)
        colours = "RGB" if pixels.shape[-1] == 3 else "grey"
        print(
            f"wrote {npz}: images {pixels.shape} uint8 ({colours})"
            + (", labels" if labels is not None else "")
        )
    return 0


def _check_export_generator(path: Path, request: Request) -> None:
    """An export holds one generator: ema= may only ask for that one."""
    from experiments.run.exported import is_exported, read_sidecar

    if request.ema is None or not is_exported(path):
        return
    held = bool(read_sidecar(path).get("ema"))
    if request.ema != held:
        which = "the EMA generator" if held else "the raw generator"
        flag, other = ("--ema", "--no-ema") if request.ema else ("--no-ema", "--ema")
        raise ConfigError(flag, None, f"{other} or left out: {path} holds {which} only")


def _default_out(
    run_dir: Path, iteration: int, request: Request, generator: str, model: Any
) -> Path:
    from experiments.gan import conditional

    name = f"iter_{iteration}_seed_{request.seed}_num_{request.num}"
    if request.label is not None:
        name += f"_class_{request.label}"
    if conditional.uses_ema(model):
        name += f"_{generator}"
    return run_dir / SAMPLES_DIR / f"{name}.png"


def main() -> None:
    """Bad input (ConfigError) is exit 2, a run that cannot be sampled (EvaluationError: no
    readable checkpoint) exit 1, each one line, as experiments-eval."""
    exit_in_one_line(sample)
