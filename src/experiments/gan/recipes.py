"""GAN models: `conf/model/<gan>.yaml` names one of MMGen's bundled recipes.

The recipe file is MMGen's own (mmgen/.mim/configs/...), loaded with mmcv's Config exactly as
`tools/train.py` would. We change only what our groups own (data, image scale, batch,
iterations, intervals, work dir, seed) plus the user's `cfg_options` (MMGen's
`--cfg-options`), so the composed config is still the recipe a user recognises.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import validation as check
from experiments.dotted_keys import flatten
from experiments.errors import ConfigError
from experiments.gan import ddp as gan_ddp

FAMILY = "gan"
# each an integer >= 1 (eval_images may be 0)
POSITIVE = (
    "batch_size",
    "iters",
    "checkpoint_interval",
    "log_interval",
    "sample_interval",
    "num_samples",
)
RECIPE_KEYS = (
    "family",
    "recipe",
    "scale",
    *POSITIVE,
    "eval_images",
    "eval_untrained",
    "ddp",
    "cfg_options",
)
CHECKPOINT_DIRNAME = "ckpt"  # MMGen's: <work_dir>/ckpt/<basename of work_dir>/iter_N.pth
SAMPLES_DIRNAME = "training_samples"  # MMGen's VisualizeUnconditionalSamples output_dir
# Modules a conditional recipe's dumped config imports (mmcv custom_imports) so that MMGen's own
# tools find our dataset and sample hook.
CUSTOM_IMPORTS = ("experiments.gan.datasets", "experiments.gan.conditional")


def is_gan(model: Any) -> bool:
    return bool(model.get("family") == FAMILY) if hasattr(model, "get") else False


@dataclass(frozen=True)
class GANRecipe:
    """The model group's values for a GAN, checked."""

    recipe: str
    scale: int
    batch_size: int
    iters: int
    checkpoint_interval: int
    log_interval: int
    sample_interval: int
    num_samples: int
    eval_images: int
    cfg_options: dict[str, Any]
    eval_untrained: bool = False
    ddp: str | None = None  # dynamic | static (gan/ddp.py); None: what the recipe file says

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> GANRecipe:
        for key in values:
            if key not in RECIPE_KEYS:
                raise ConfigError(
                    f"model.{key}",
                    values[key],
                    "not a key of a GAN model; valid: " + ", ".join(RECIPE_KEYS),
                )
        scale = check.integer(values.get("scale"), "model.scale", minimum=8)
        if scale & (scale - 1):
            raise ConfigError(
                "model.scale",
                scale,
                f"a power of two (DCGAN-style up/down sampling), e.g. "
                f"{2 ** round(math.log2(scale))}",
            )
        options = values.get("cfg_options") or {}
        if not isinstance(options, dict):
            raise ConfigError(
                "model.cfg_options",
                options,
                "a mapping of recipe keys, e.g. {model: {generator: {base_channels: 128}}}",
            )
        integers = {
            key: check.integer(values.get(key), f"model.{key}", minimum=1) for key in POSITIVE
        }
        return cls(
            recipe=str(values.get("recipe")),
            scale=scale,
            **integers,
            eval_images=check.integer(values.get("eval_images"), "model.eval_images", minimum=0),
            cfg_options=flatten(options),
            eval_untrained=check.boolean(
                values.get("eval_untrained", False), "model.eval_untrained"
            ),
            ddp=None if values.get("ddp") is None else gan_ddp.mode(values["ddp"]),
        )


def configs_root(model_name: str = "gan") -> Path:
    """MMGen's bundled recipes (installed with the package, like `mim` would fetch them)."""
    from experiments.gan.mmgen_compat import mmgen_root

    root = mmgen_root()
    if root is None:
        raise ConfigError(
            "model",
            model_name,
            "GAN models need MMGeneration, which is not installed: run "
            "scripts/gan/install_gan.sh .venv (or `make setup-gan`)",
        )
    return root / ".mim" / "configs"


def recipe_path(recipe: str) -> Path:
    root = configs_root()
    path = root / recipe
    if not path.is_file():
        family = root / recipe.split("/")[0]
        options = (
            sorted(f"{family.name}/{p.name}" for p in family.glob("*.py"))
            if family.is_dir()
            else sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "_base_")
        )
        raise ConfigError(
            "model.recipe", recipe, "a recipe bundled with mmgen, e.g. " + ", ".join(options[:6])
        )
    return path


def build_config(
    recipe: GANRecipe,
    data: dict[str, Any],
    image_root: Path,
    channels: int,
    run_dir: Path,
    seed: int,
) -> Any:
    """MMGen's recipe with our groups' values; returns an mmcv Config."""
    import mmcv

    from experiments.gan import datasets as gan_datasets
    from experiments.gan import mmgen_compat

    cfg = mmcv.Config.fromfile(str(recipe_path(recipe.recipe)))
    if mmgen_compat.uses_ada(cfg._cfg_dict.to_dict()) and not mmgen_compat.ada_available():
        raise ConfigError("model.recipe", recipe.recipe, mmgen_compat.ADA_MESSAGE)
    model = cfg.model
    _set_first(model.generator, ("output_scale", "out_scale", "out_size"), recipe.scale)
    _set_first(model.discriminator, ("input_scale", "in_scale", "in_size"), recipe.scale)
    model.generator.out_channels = channels
    model.discriminator.in_channels = channels
    classes = _conditional_classes(cfg, recipe, data, image_root)
    if classes:  # the recipe reads mmcls.CIFAR10; ours reads the run's labelled folders
        cfg.data.train = mmcv.ConfigDict(
            gan_datasets.train_data(image_root, recipe.scale, channels)
        )
        cfg.custom_imports = dict(imports=list(CUSTOM_IMPORTS), allow_failed_imports=False)
        if "dataset_type" in cfg:  # the recipe's variable, shown in the dumped config
            cfg.dataset_type = gan_datasets.DATASET_TYPE
    else:
        cfg.data.train.imgs_root = str(image_root)
        cfg.data.train.pipeline = _pipeline(cfg.data.train.pipeline, recipe.scale, channels)
    if "train_pipeline" in cfg:  # the recipe's variable, shown in the dumped config
        cfg.train_pipeline = cfg.data.train.pipeline
    cfg.data.val = None  # GAN training reads no validation split (MMGen: validate=False)
    cfg.data.samples_per_gpu = recipe.batch_size
    cfg.data.workers_per_gpu = 0  # a PNG batch decodes in ~10 ms; no worker processes
    cfg.total_iters = recipe.iters
    cfg.checkpoint_config = dict(
        cfg.get("checkpoint_config") or {}, interval=recipe.checkpoint_interval, by_epoch=False
    )
    cfg.log_config = dict(cfg.get("log_config") or {}, interval=recipe.log_interval)
    cfg.log_config.setdefault("hooks", [dict(type="TextLoggerHook")])
    cfg.custom_hooks = _with_our_sample_grid(cfg, recipe, classes)
    cfg.evaluation = None  # the recipes' FID/IS hooks need Inception weights (a download)
    cfg.metrics = dict(
        swd=dict(
            type="SWD", num_images=recipe.eval_images, image_shape=(3, recipe.scale, recipe.scale)
        ),
        ms_ssim=dict(type="MS_SSIM", num_images=recipe.eval_images),
    )
    cfg.work_dir = str(run_dir)
    cfg.seed = seed
    cfg.gpu_ids = [0]  # train_model: batch = len(gpu_ids) x samples_per_gpu on one process
    cfg.resume_from = None
    cfg.load_from = None
    gan_ddp.configure(cfg, recipe.ddp, recipe.recipe)  # model.ddp: MMGen's keys for it
    if recipe.cfg_options:
        cfg.merge_from_dict(_hook_indices(recipe.cfg_options, cfg.custom_hooks))
    arch = cfg.model.discriminator.get("arch_cfg")  # BigGAN's blocks, given in cfg_options
    if arch and arch.get("in_channels"):
        arch.in_channels[0] = channels  # the data's channels, as in_channels above
    return cfg


def _with_our_sample_grid(cfg: Any, recipe: GANRecipe, classes: int) -> list[dict[str, Any]]:
    """The recipe's custom hooks with its sample grid replaced by ours: `model.num_samples`
    images every `model.sample_interval` iterations into the run's samples folder, one row
    per class for a conditional recipe, drawn by the EMA generator where the recipe keeps one."""
    from experiments.gan.conditional import HOOK_TYPE as VISUALIZE_CLASS_ROWS

    hooks = [
        h for h in cfg.get("custom_hooks") or [] if h.get("type") != "VisualizeUnconditionalSamples"
    ]
    sampling = dict(
        type="VisualizeUnconditionalSamples",
        output_dir=SAMPLES_DIRNAME,
        interval=recipe.sample_interval,
        num_samples=recipe.num_samples,
        nrow=math.ceil(math.sqrt(recipe.num_samples)),
    )
    if classes:  # one row per class, num_samples // classes images per row
        sampling.update(type=VISUALIZE_CLASS_ROWS, num_classes=classes)
        del sampling["nrow"]
    if (cfg.get("train_cfg") or {}).get("use_ema"):  # the EMA generator's samples, not 2N
        sampling["kwargs"] = dict(sample_model="ema")
    return [*hooks, sampling]


def _conditional_classes(
    cfg: Any, recipe: GANRecipe, data: dict[str, Any], image_root: Path
) -> int:
    """0 for an unconditional recipe; else the run's class count, set in the recipe's model
    (BasiccGAN, generator and discriminator take num_classes), checked against the grid."""
    from experiments.gan import datasets as gan_datasets

    if not cfg.model.get("num_classes"):
        return 0
    classes = gan_datasets.count_classes(data, image_root)
    for node in (cfg.model, cfg.model.generator, cfg.model.discriminator):
        if "num_classes" in node:
            node.num_classes = classes
    if recipe.num_samples % classes:
        raise ConfigError(
            "model.num_samples",
            recipe.num_samples,
            f"a multiple of the {classes} classes (one grid row per class), e.g. "
            f"{classes * max(1, round(recipe.num_samples / classes))}",
        )
    return classes


def _hook_indices(options: dict[str, Any], hooks: list[Any]) -> dict[str, Any]:
    """cfg_options may name a custom hook by its type: custom_hooks.<Type>.<arg> becomes
    custom_hooks.<index>.<arg> (mmcv's merge takes list indices), e.g.
    custom_hooks.ExponentialMovingAverageHook.start_iter=0."""
    types = [str(h.get("type")) for h in hooks]
    result = {}
    for key, value in options.items():
        parts = key.split(".")
        if parts[0] == "custom_hooks" and len(parts) > 2 and not parts[1].isdigit():
            if parts[1] not in types:
                raise ConfigError(
                    f"model.cfg_options.{key}",
                    value,
                    "a hook of the recipe: " + ", ".join(f"custom_hooks.{t}" for t in types),
                )
            key = ".".join([parts[0], str(types.index(parts[1])), *parts[2:]])
        result[key] = value
    return result


def _set_first(node: Any, keys: tuple[str, ...], value: int) -> None:
    for key in keys:
        if key in node:
            node[key] = value
            return
    node[keys[0]] = value


def _pipeline(pipeline: list[Any], scale: int, channels: int) -> list[Any]:
    """The recipe's own transforms, with our image size and channel count."""
    adapted = []
    for step in pipeline:
        step = dict(step)
        kind = step.get("type")
        if kind == "LoadImageFromFile":
            step["flag"] = "grayscale" if channels == 1 else "color"
        elif kind == "Resize":
            step["scale"] = (scale, scale)
            step.pop("keep_ratio", None)
        elif kind == "Normalize":
            step["mean"] = [127.5] * channels
            step["std"] = [127.5] * channels
        adapted.append(step)
    return adapted


def build_model(cfg: Any) -> Any:
    from mmgen.models import build_model as mmgen_build_model

    try:
        return mmgen_build_model(cfg.model, train_cfg=cfg.train_cfg, test_cfg=cfg.test_cfg)
    except Exception as error:  # a cfg_options key the recipe's classes do not take
        if "ADAUnavailableError" in type(error).__name__:
            raise ConfigError("model.recipe", cfg.filename, str(error)) from None
        raise ConfigError(
            "model.cfg_options",
            os.path.basename(str(cfg.filename)),
            f"MMGen cannot build the recipe's model: {type(error).__name__}: {error}",
        ) from None
