"""Data groups: each `conf/data/<name>.yaml` names a dataset builder that returns
(train, validation) datasets, the contract of SpikingJelly's TrainingConfig."""

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
# builder takes them (then its annotation types them).
_DESCRIPTIVE_KEYS: dict[str, Any] = {"name": str, "builder": str, "num_classes": int | None}


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
