"""Image augmentation as a paper's recipe states it: `data.augment` of cifar10, cifar100 and
imagefolder, built from the transforms the official code calls: timm's (Spikformer's) and
torchvision's (SEW-ResNet's, SpikingJelly's image-folder builder).

- timm: RandAugment/AutoAugment/AugMix (`rand_augment_transform(config_str, hparams,
  transforms=[op names])` takes the op list, so a paper's reduced RandAugment, Spikformer's
  `aa_snn.py` Equalize/Rotate/ShearX/TranslateXRel/TranslateYRel, is given exactly, from the
  config string the paper wrote, `rand-m9-n1-mstd0.4-inc1`), RandomErasing (the `mode` and
  `count` the recipes set) and the evaluation transform (`transforms_imagenet_eval`: resize
  the shorter side to size/crop_pct, centre crop).
- torchvision: RandomResizedCrop (the same crop as timm's for the fixed interpolations these
  recipes use, drawn from torch's generator: the default pipeline of `data=imagefolder` is
  SpikingJelly's `build_imagefolder_datasets` transform for transform), the padded RandomCrop
  of CIFAR training, flips, ColorJitter and TrivialAugmentWide (`ta_wide`, the name of
  torchvision's reference scripts), which timm does not have.

The training pipeline is in timm's `transforms_imagenet_train` order (crop, flips, then the
auto-augment or colour jitter, then to-tensor, normalize, random erasing), composed here
because timm's factory takes neither an op list nor a padded crop. Spikformer pins timm
0.5.4; what differs in 1.0.x for these recipes: 0.5.4 reads `inc0` as true (`bool('0')`),
1.0 as false; 1.0 takes the op list as an argument where Spikformer copied the module to
change it; with an explicit op list `inc` no longer picks the list (Spikformer's two lists are
the same five ops, so its recipe is unchanged). Pillow 13 refuses the 0-bit posterize that
timm's increasing ops reach at magnitude 10 (Spikformer's pins gave a black image): kept here
(`_posterize_as_before`). Spikformer erases after normalizing on the GPU
(timm's prefetcher); here it is the last step of the same pipeline, on the CPU worker: the
same operation on the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from experiments.errors import ConfigError
from experiments.known_keys import refuse_unknown

CROPS = ("random_crop", "random_resized_crop", "resize")
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
ERASING_MODES = ("const", "rand", "pixel")  # timm's RandomErasing
TRIVIAL_AUGMENT = "ta_wide"  # torchvision's TrivialAugmentWide, as its reference scripts name it
# timm's auto_augment strings, by their first section (timm.data.auto_augment)
TIMM_AUTO_AUGMENT = ("rand", "augmix", "original", "originalr", "v0", "v0r", "3a")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Augment:
    """One data option's augmentation. The defaults are SpikingJelly's `build_imagefolder_
    datasets` (ImageNet's RandomResizedCrop, flip, mean/std; validation resize to size/0.875
    and centre crop); each data option's yaml states its own, a preset the paper's."""

    crop: str = "random_resized_crop"  # random_crop (pad, crop) | random_resized_crop | resize
    padding: int = 4  # random_crop's zero padding on each side
    scale: Sequence[float] = (0.08, 1.0)  # random_resized_crop's area range
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0)  # random_resized_crop's aspect range
    hflip: float = 0.5
    vflip: float = 0.0
    auto_augment: str | None = (
        None  # a timm string (rand-m9-n1-mstd0.4-inc1, original, ...) or ta_wide
    )
    auto_augment_ops: Sequence[str] | None = (
        None  # RandAugment's op list (timm names); null: timm's
    )
    color_jitter: float | None = None  # brightness = contrast = saturation; off with auto_augment
    re_prob: float = 0.0  # random erasing (timm's RandomErasing)
    re_mode: str = "const"
    re_count: int = 1
    interpolation: str = "bilinear"  # of every resize, train and validation
    mean: Sequence[float] = IMAGENET_MEAN
    std: Sequence[float] = IMAGENET_STD
    crop_pct: float = 0.875  # validation: resize to floor(size / crop_pct), centre crop size


def parse(values: dict[str, Any] | None, key: str = "data.augment") -> Augment:
    """The augment node checked key by key, each refusal naming the key, the bad value and a
    valid one; then the transforms are built once, so what timm itself refuses (a malformed
    auto_augment string) is refused here too, before launch."""
    if values is None:
        return Augment()
    refuse_unknown(f"{key}.", values, frozenset(field.name for field in fields(Augment)), key)
    augment = Augment(**values)
    _check(augment, key)
    try:
        train_transform(augment, 32)
        validation_transform(augment, 32)
    except (AssertionError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"{key}.auto_augment",
            augment.auto_augment,
            f"timm refuses it ({type(error).__name__}: {error}); e.g. rand-m9-n1-mstd0.4-inc1",
        ) from None
    return augment


def _check(augment: Augment, key: str) -> None:
    from experiments import validation as check

    check.choice(augment.crop, f"{key}.crop", CROPS)
    check.integer(augment.padding, f"{key}.padding", minimum=0)
    for name in ("scale", "ratio"):
        pair = getattr(augment, name)
        if (
            not isinstance(pair, Sequence)
            or len(pair) != 2
            or not all(_number(v) and v > 0 for v in pair)
            or pair[0] > pair[1]
        ):
            raise ConfigError(
                f"{key}.{name}", _plain(pair), "[low, high] with 0 < low <= high, e.g. [0.08, 1.0]"
            )
    for name in ("hflip", "vflip", "re_prob"):
        value = getattr(augment, name)
        if not _number(value) or not 0 <= value <= 1:
            raise ConfigError(f"{key}.{name}", value, "a probability from 0 to 1, e.g. 0.5")
    check.choice(augment.re_mode, f"{key}.re_mode", ERASING_MODES)
    check.integer(augment.re_count, f"{key}.re_count", minimum=1)
    check.choice(augment.interpolation, f"{key}.interpolation", INTERPOLATIONS)
    if augment.color_jitter is not None and (
        not _number(augment.color_jitter) or augment.color_jitter < 0
    ):
        raise ConfigError(
            f"{key}.color_jitter", augment.color_jitter, "null or a number >= 0, e.g. 0.4"
        )
    for name in ("mean", "std"):
        triple = getattr(augment, name)
        if not isinstance(triple, Sequence) or len(triple) != 3 or not all(map(_number, triple)):
            raise ConfigError(f"{key}.{name}", _plain(triple), "three numbers, one a channel (RGB)")
    if any(value <= 0 for value in augment.std):
        raise ConfigError(f"{key}.std", _plain(augment.std), "three numbers > 0")
    if not _number(augment.crop_pct) or not 0 < augment.crop_pct <= 1:
        raise ConfigError(
            f"{key}.crop_pct", augment.crop_pct, "a fraction in (0, 1], e.g. 0.875 (1.0: no crop)"
        )
    _check_auto_augment(augment, key)


def _check_auto_augment(augment: Augment, key: str) -> None:
    from timm.data.auto_augment import NAME_TO_OP

    name = augment.auto_augment
    if name is not None and (
        not isinstance(name, str)
        or (name != TRIVIAL_AUGMENT and name.split("-")[0] not in TIMM_AUTO_AUGMENT)
    ):
        raise ConfigError(
            f"{key}.auto_augment",
            name,
            "null, ta_wide (torchvision's TrivialAugmentWide) or a timm string starting with "
            f"{', '.join(TIMM_AUTO_AUGMENT)}, e.g. rand-m9-n1-mstd0.4-inc1",
        )
    ops = augment.auto_augment_ops
    if ops is None:
        return
    if name is None or not name.startswith("rand"):
        raise ConfigError(
            f"{key}.auto_augment_ops",
            _plain(ops),
            "null: an op list is RandAugment's (set data.augment.auto_augment=rand-...)",
        )
    unknown = [op for op in ops if op not in NAME_TO_OP] if isinstance(ops, Sequence) else [ops]
    if isinstance(ops, str) or unknown or not ops:
        raise ConfigError(
            f"{key}.auto_augment_ops",
            _plain(ops),
            f"a list of timm's op names ({', '.join(sorted(NAME_TO_OP))})",
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, list)) else value


def train_transform(augment: Augment, image_size: int) -> Callable[[Any], Any]:
    """PIL image -> normalized tensor, in timm's training order (see the module docstring)."""
    from timm.data.random_erasing import RandomErasing
    from torchvision import transforms

    steps: list[Callable[[Any], Any]] = [_crop(augment, image_size)]
    if augment.hflip > 0:
        steps.append(transforms.RandomHorizontalFlip(p=augment.hflip))
    if augment.vflip > 0:
        steps.append(transforms.RandomVerticalFlip(p=augment.vflip))
    if augment.auto_augment:
        steps.append(_auto_augment(augment, image_size))
    elif augment.color_jitter:
        steps.append(transforms.ColorJitter(*(float(augment.color_jitter),) * 3))
    steps += [
        transforms.ToTensor(),
        transforms.Normalize(mean=list(augment.mean), std=list(augment.std)),
    ]
    if augment.re_prob > 0:
        steps.append(
            RandomErasing(
                augment.re_prob, mode=augment.re_mode, max_count=augment.re_count, device="cpu"
            )
        )
    return transforms.Compose(steps)


def validation_transform(augment: Augment, image_size: int) -> Callable[[Any], Any]:
    """timm's own evaluation transform: resize the shorter side to floor(size / crop_pct) with
    the recipe's interpolation, centre crop `image_size`, to tensor, normalize."""
    from timm.data.transforms_factory import transforms_imagenet_eval

    return transforms_imagenet_eval(
        image_size,
        crop_pct=augment.crop_pct,
        interpolation=augment.interpolation,
        mean=tuple(augment.mean),
        std=tuple(augment.std),
    )


def _crop(augment: Augment, image_size: int) -> Callable[[Any], Any]:
    from timm.data.transforms import str_to_interp_mode
    from torchvision import transforms

    interpolation = str_to_interp_mode(augment.interpolation)
    if augment.crop == "random_crop":
        return transforms.RandomCrop(image_size, padding=augment.padding, pad_if_needed=True)
    if augment.crop == "resize":
        return transforms.Resize((image_size, image_size), interpolation=interpolation)
    return transforms.RandomResizedCrop(
        image_size,
        scale=tuple(augment.scale),
        ratio=tuple(augment.ratio),
        interpolation=interpolation,
    )


def _auto_augment(augment: Augment, image_size: int) -> Callable[[Any], Any]:
    """timm's hparams exactly as its transforms_imagenet_train passes them (translate_const
    45% of the side, fill the mean colour, the recipe's interpolation), and the op list."""
    from timm.data.auto_augment import (
        augment_and_mix_transform,
        auto_augment_transform,
        rand_augment_transform,
    )
    from timm.data.transforms import str_to_interp_mode, str_to_pil_interp
    from torchvision import transforms

    name = str(augment.auto_augment)
    if name == TRIVIAL_AUGMENT:
        return transforms.TrivialAugmentWide(
            interpolation=str_to_interp_mode(augment.interpolation)
        )
    hparams: dict[str, Any] = {
        "translate_const": int(image_size * 0.45),
        "img_mean": tuple(min(255, round(255 * value)) for value in augment.mean),
        "interpolation": str_to_pil_interp(augment.interpolation),
    }
    if name.startswith("rand"):
        ops = list(augment.auto_augment_ops) if augment.auto_augment_ops else None
        return _posterize_as_before(rand_augment_transform(name, hparams, transforms=ops))
    if name.startswith("augmix"):
        hparams["translate_pct"] = 0.3
        return _posterize_as_before(augment_and_mix_transform(name, hparams))
    return _posterize_as_before(auto_augment_transform(name, hparams))


def _posterize_as_before(transform: Any) -> Any:
    """timm's posterize ops with the image Pillow gave for 0 bits until it began to refuse 0
    (Pillow 13 raises ValueError "bits must be between or equal to 1 and 8"): timm's
    PosterizeIncreasing keeps 0 bits at magnitude 10, which `rand-m9-mstd0.5-inc1`
    (Spikformer's ImageNet recipe) draws in ~2% of its samples, and a worker's ValueError
    ends the run. 0 bits masks every value off: a black image."""
    policy = getattr(transform, "policy", None)  # AutoAugment: sub-policies of ops
    groups = policy if policy is not None else [getattr(transform, "ops", [])]
    for ops in groups:
        for op in ops:
            if op.name.startswith("Posterize"):
                op.aug_fn = _posterize
    return transform


def _posterize(image: Any, bits_to_keep: int, **kwargs: Any) -> Any:
    from PIL import Image
    from timm.data.auto_augment import posterize

    if bits_to_keep <= 0:
        return Image.new(image.mode, image.size)
    return posterize(image, bits_to_keep, **kwargs)


def describe(augment: Augment, image_size: int) -> dict[str, str]:
    """The two pipelines as their transforms print (the plan and the benchmark show them)."""
    return {
        "train": _names(train_transform(augment, image_size)),
        "validation": _names(validation_transform(augment, image_size)),
    }


def _names(pipeline: Any) -> str:
    return ", ".join(type(step).__name__ for step in getattr(pipeline, "transforms", [pipeline]))
