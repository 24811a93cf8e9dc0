"""Data groups: each `conf/data/<name>.yaml` names a dataset builder that returns
(train, validation) datasets, the contract of SpikingJelly's TrainingConfig.

A builder may declare, as attributes, what the plan needs from it before launch (none is
required, so a user's own builder needs none):
- `input_layout = "NTCHW"`: it yields `[N, T, C, H, W]` sequences (snn/plan.py);
- `check_options(data)`: its keys the signature cannot check (an augment node, a split);
- `check_layout(data)`: what `data.root` must hold (the files, a cache), refused in one line;
- `split_sizes(data)`: its (train, validation) sample counts, None while not on disk.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.errors import ConfigError
from experiments.validation import in_words, of_type

# Keys that describe the data to the rest of the run, with their types; passed on only if the
# builder takes them (then its annotation types them). `channels`: what each sample holds (3 for
# images, 2 for event frames), read by the model's `in_channels: ${data.channels}`.
_DESCRIPTIVE_KEYS: dict[str, Any] = {
    "name": str,
    "builder": str,
    "num_classes": int | None,
    "channels": int,
}


def import_object(path: str, key: str) -> Any:
    module_name, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(key, path, f"cannot import it ({error})") from None


def dataset_kwargs(data: DictConfig) -> dict[str, Any]:
    """Arguments for the group's builder, checked against the builder's own signature: a
    misspelt data key is an error rather than silently ignored, and a value must fit the
    parameter's annotation. Every family's plan asks (a GAN's MMGen recipe reads only some
    data keys, but a value of the wrong type is a mistake whichever family meets it)."""
    values = OmegaConf.to_container(data, resolve=True)
    assert isinstance(values, dict)
    builder = import_object(str(values["builder"]), "data.builder")
    accepted = inspect.signature(builder).parameters
    types = {**_DESCRIPTIVE_KEYS, **_annotations(builder)}
    for key, value in values.items():
        if key not in accepted and key not in _DESCRIPTIVE_KEYS:
            valid = ", ".join(sorted(set(accepted) | set(_DESCRIPTIVE_KEYS)))
            raise ConfigError(
                f"data.{key}", value, f"not a key of data={values['name']}; valid keys: {valid}"
            )
        if key in types and not of_type(value, types[key]):
            raise ConfigError(f"data.{key}", value, in_words(types[key]))
    return {key: value for key, value in values.items() if key in accepted}


def _annotations(builder: Any) -> dict[str, Any]:
    """The builder's parameter types ({} when its annotations cannot be resolved: a builder
    of the user's own is then checked for its keys only)."""
    try:
        return typing.get_type_hints(builder)
    except Exception:
        return {}


def declared(data: dict[str, Any], name: str) -> Any:
    """What the builder declares under `name` (see the module docstring), or None."""
    builder = import_object(str(data["builder"]), "data.builder")
    return getattr(builder, name, None)


def check(data: dict[str, Any], on_disk: bool) -> None:
    """The builder's own checks before launch: its options always, and what `data.root`
    must hold when there is a root to look at (`on_disk`; not a dry run's placeholder)."""
    options = declared(data, "check_options")
    if options is not None:
        options(data)
    layout = declared(data, "check_layout")
    if on_disk and layout is not None:
        layout(data)


def split_sizes(data: dict[str, Any]) -> tuple[int, int] | None:
    """(train, validation) samples as the builder declares them (None: not declared, or not
    on disk yet)."""
    sizes = declared(data, "split_sizes")
    return sizes(data) if sizes is not None else None


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def training_images(data: dict[str, Any]) -> int | None:
    """The images an epoch trains on (None: an image folder not there yet, a dry run's
    placeholder root)."""
    name = data.get("name")
    if name in ("digits", "digits_sequence"):
        from experiments.data.digits import DIGITS_TOTAL

        return DIGITS_TOTAL - int(data["val_size"])
    if name == "synthetic":
        return int(data["train_size"])
    if declared(data, "split_sizes") is not None:
        sizes = split_sizes(data)
        return None if sizes is None else sizes[0]
    if "root" in data:
        train = Path(str(data["root"])) / str(data.get("train_subdirectory", "train"))
        if not train.is_dir():
            return None
        count = sum(
            1 for path in train.rglob("*") if path.suffix.lower() in IMAGE_SUFFIXES
        )  # one pass of file names: ImageNet's 1.28 M take a few seconds, once, before launch
        fraction = data.get("val_fraction")
        return count - round(count * fraction) if fraction else count
    return None
