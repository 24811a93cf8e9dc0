"""Folders of image files for MMGen's UnconditionalImageDataset (GAN runs).

MMGen's data pipeline reads files from `imgs_root`; `data=digits` has no files, so its
images are written once as PNGs into a cache folder shared by every run. Written to a
temporary folder and renamed, so ranks starting at the same moment never see half of it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

DATA_DIR_ENV = "EXPERIMENTS_DATA_DIR"
DIGITS_FOLDER = "digits_png_v1"
GAN_DATA = ("digits", "imagefolder")


def data_dir() -> Path:
    """$EXPERIMENTS_DATA_DIR, else $XDG_CACHE_HOME/experiments/data, else
    ~/.cache/experiments/data (an empty or relative XDG_CACHE_HOME is ignored, as the XDG
    spec says). The test suite points both variables at a folder of its own session."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):
        cache = str(Path.home() / ".cache")
    return Path(cache) / "experiments" / "data"


def check_gan_data(name: str) -> None:
    """MMGen's recipes read image files: the data options a GAN trains on."""
    if name not in GAN_DATA:
        raise ConfigError("data", name, "GAN models train on data=" + " or data=".join(GAN_DATA))


def gan_image_root(data: dict[str, Any]) -> tuple[Path, int]:
    """(folder MMGen reads, channels) for a GAN run; checks only, writes nothing."""
    name = data["name"]
    check_gan_data(name)
    if name == "digits":
        return data_dir() / DIGITS_FOLDER, 1
    if name == "imagefolder":
        root = Path(str(data["root"]))
        train = root / str(data.get("train_subdirectory", "train"))
        folder = train if train.is_dir() else root
        if not folder.is_dir() or not any(_images(folder)):
            raise ConfigError(
                "data.root", str(root), "a folder with image files (or a train/ folder of them)"
            )
        return folder, 3
    raise AssertionError(f"data={name} passed check_gan_data without a folder of its own")


def _images(folder: Path) -> Any:
    suffixes = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}
    return (p for p in folder.rglob("*") if p.suffix.lower() in suffixes)


def ensure_digits_pngs(root: Path) -> Path:
    """scikit-learn's digits (1,797 8x8 grey images) as <root>/<label>/<index>.png."""
    if root.is_dir():
        return root
    import numpy as np
    from PIL import Image

    from experiments.data.digits import load_digits_arrays

    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    for index, (image, label) in enumerate(zip(*load_digits_arrays(), strict=True)):
        folder = tmp / str(label)
        folder.mkdir(exist_ok=True)
        pixels = np.round(image * 255.0 / 16.0).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{index:04d}.png")
    try:
        os.rename(tmp, root)
    except OSError:  # another rank renamed its copy first
        shutil.rmtree(tmp, ignore_errors=True)
    return root
