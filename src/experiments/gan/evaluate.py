"""`experiments-eval` of a GAN run's checkpoint: the download-free metrics of training.

The model and data are rebuilt from the run's record through the plan a single-process run of
that config gets, and the weights loaded strictly (a checkpoint that does not fit the recipe is
refused, not half loaded), so on the run's final checkpoint, data, image count and seed the
metrics (gan/quality.py) repeat the recorded ones. MMGen's precision/recall is not computed: it
loads VGG16 weights, a download.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.errors import ConfigError, EvaluationError
from experiments.gan.exported_generator import fitting, readable
from experiments.known_keys import nearest, option_file
from experiments.run.record import read_summary, write_json_atomic
from experiments.run.recorded_run import (
    ONE_LOCAL_PROCESS,
    override_value,
    read_choices,
    read_config,
    set_one_local_process,
)

EVAL_FILE = "eval.json"
# What an evaluation may change; the generator and its training are the run's.
OVERRIDABLE = ("data", "model.eval_images", "seed")
NOT_COMPUTED = {
    "precision_recall": "MMGen's PR metric needs VGG16 weights (NVIDIA's vgg16.pt or "
    "torchvision's ImageNet weights): a download, which this evaluation never makes",
}


def evaluate_run(run_dir: Path, checkpoint: Path | None, overrides: list[str]) -> int:
    """Print and record (eval.json) SWD and MS-SSIM of one checkpoint; the exit status."""
    plan = recorded_plan(run_dir, overrides)
    if plan.recipe.eval_images < 2:
        raise ConfigError(
            "model.eval_images",
            plan.recipe.eval_images,
            "at least 2 images to compare; the run recorded model.eval_images="
            f"{plan.recipe.eval_images} (no quality metrics): pass model.eval_images=N",
        )
    path, model, iteration = checkpoint_or_export(plan, run_dir, checkpoint)
    from mmgen.datasets import build_dataset

    from experiments.data.image_files import DIGITS_FOLDER, ensure_digits_pngs
    from experiments.gan.conditional import uses_ema
    from experiments.gan.quality import quality

    if plan.image_root.name == DIGITS_FOLDER:
        ensure_digits_pngs(plan.image_root)
    dataset = build_dataset(plan.mmgen_config.data.train)
    generator = "ema" if uses_ema(model) else "generator"
    print(
        f"Evaluating {path} (iteration {iteration}, {generator}) on data="
        f"{plan.choices.get('data')} ({plan.image_root}): {plan.recipe.eval_images} images, "
        f"seed {plan.seed} ..."
    )
    started = time.perf_counter()
    metrics = quality(model, dataset, plan)
    seconds = time.perf_counter() - started
    summary = read_summary(run_dir) or {}
    recorded = summary.get("metrics") or {}
    record = {
        "run_dir": str(run_dir),
        "checkpoint": str(path),
        "iteration": iteration,
        "engine": summary.get("engine"),
        "model": summary.get("model"),
        "recipe": plan.recipe.recipe,
        "generator": generator,
        "data": {
            "name": plan.choices.get("data"),
            "image_root": str(plan.image_root),
            "images_in_data": len(dataset),
        },
        "overrides": overrides,
        "seed": plan.seed,
        "metrics": metrics,
        "not_computed": NOT_COMPUTED,
        "seconds": round(seconds, 2),
        # what training recorded for its final generator, to compare at a glance
        "run_metrics": {k: recorded.get(k) for k in ("iters", "eval_images", "swd", "ms_ssim")},
    }
    write_json_atomic(run_dir / EVAL_FILE, record)
    print(_report(record), flush=True)
    return 0


def _report(record: dict[str, Any]) -> str:
    metrics, run = record["metrics"], record["run_metrics"]
    lines = []
    if "swd" in metrics:
        same = (
            run.get("iters") == record["iteration"]
            and run.get("eval_images") == metrics["eval_images"]
            and not record["overrides"]
        )
        note = (
            f" (the run recorded {run['swd']:.4f})"
            if same and isinstance(run.get("swd"), float)
            else ""
        )
        lines.append(f"  swd (x1e3)    {metrics['swd']:.4f}{note} (lower is better)")
    else:
        lines.append("  swd           not computed: images below 16 x 16 (SWD's pyramid)")
    lines.append(
        f"  ms_ssim       {metrics['ms_ssim']:.4f} (generated pairs; data: "
        f"{metrics['ms_ssim_real']:.4f}; lower is more diverse)"
    )
    lines.append(f"  images        {metrics['eval_images']} generated, as many from the data")
    lines.append(f"  precision/recall  not computed: {NOT_COMPUTED['precision_recall']}")
    lines.append(f"  written       {Path(record['run_dir']) / EVAL_FILE}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the run's record


def recorded_plan(run_dir: Path, overrides: list[str]) -> Any:
    """The GANPlan a single CPU process gets for the run's recorded config, with the
    evaluation's overrides: MMGen's config (model, data.train) exactly as training built it."""
    from experiments.composition import _resolve
    from experiments.gan.plan import build_gan_plan
    from experiments.gan.recipes import is_gan

    cfg, choices = _config(run_dir, overrides)
    values = _resolve(cfg)
    if not is_gan(values.get("model") or {}):
        raise ConfigError(
            "run", str(run_dir), "a GAN run (model.family: gan); this run trained an SNN"
        )
    return build_gan_plan(values, run_dir, [], choices)


def _config(run_dir: Path, overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    cfg = read_config(run_dir)
    choices = read_choices(run_dir, missing_ok=True)
    choices.setdefault("data", str(cfg.data.get("name")))
    choices.setdefault("model", str(cfg.model.get("recipe")))
    # A group switch first (data=imagefolder), then its keys (data.root=...), whatever the
    # order on the command line.
    ordered = sorted(overrides, key=lambda o: o.partition("=")[0] != "data")
    for override in ordered:
        key, _, text = override.partition("=")
        value = override_value(text)
        if key == "data":
            cfg.data = _data_option(str(value))
            choices["data"] = str(value)
        elif key.startswith("data."):
            name = key.removeprefix("data.")
            if "." in name or name not in cfg.data:
                known = sorted(str(k) for k in cfg.data)
                hint = nearest(name, known, "data.", "valid keys: ")
                raise ConfigError(key, value, f"not a key of data={choices['data']}; {hint}")
            cfg.data[name] = value
        elif key in OVERRIDABLE:
            OmegaConf.update(cfg, key, value, merge=True)
        else:
            raise ConfigError(
                key,
                value,
                "a GAN evaluation changes only its data and sampling: data=<option>, "
                "data.<key>=..., model.eval_images=N or seed=N (the generator is the run's)",
            )
    set_one_local_process(cfg, cleared=("resume", "resume_from", "load_from"))
    choices.update(ONE_LOCAL_PROCESS)
    return cfg, choices


def _data_option(name: str) -> DictConfig:
    path = option_file("data", name)
    if not path.is_file():
        options = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError("data", name, "one of the data group's options: " + ", ".join(options))
    node = OmegaConf.load(path)
    assert isinstance(node, DictConfig)
    return node


# ---------------------------------------------------------------- checkpoints


def checkpoint_or_export(plan: Any, run_dir: Path, chosen: Path | None) -> tuple[Path, Any, int]:
    """(the checkpoint or experiments-export file, the model with its weights, iteration)."""
    from experiments.run.exported import is_exported

    if chosen is not None and is_exported(chosen):
        from experiments.gan.exported_generator import load_exported

        model, iteration, _ = load_exported(plan, chosen)
        return chosen, model, iteration
    path = checkpoint_of(run_dir, chosen)
    model, iteration = load_model(plan, path)
    return path, model, iteration


def checkpoint_of(run_dir: Path, chosen: Path | None) -> Path:
    """The checkpoint named (it must load), else the run's newest readable one."""
    from experiments.gan.checkpoints import checkpoint_dir, latest_checkpoint

    if chosen is None:
        newest = latest_checkpoint(run_dir)
        if newest is None:
            raise EvaluationError(
                f"{run_dir} has no readable MMGen checkpoint in {checkpoint_dir(run_dir)}"
            )
        return newest
    if not chosen.is_file() or chosen.suffix != ".pth":
        raise ConfigError(
            "checkpoint",
            str(chosen),
            f"an MMGen checkpoint file of this run, e.g. {checkpoint_dir(run_dir)}/iter_N.pth",
        )
    readable(chosen, "checkpoint")
    return chosen.resolve()


def load_model(plan: Any, checkpoint: Path) -> tuple[Any, int]:
    """(model in eval mode with the checkpoint's weights, the checkpoint's iteration)."""
    from mmcv.runner import load_checkpoint

    from experiments.gan.recipes import build_model

    model = build_model(plan.mmgen_config)
    data = plan.choices.get("data")
    with fitting(
        checkpoint,
        f"weights of the model this run's recipe builds ({plan.recipe.recipe} on data={data})",
    ):
        loaded = load_checkpoint(
            model, str(checkpoint), map_location="cpu", strict=True, logger="silent"
        )
    model.eval()
    meta = (loaded.get("meta") or {}) if isinstance(loaded, dict) else {}
    iteration = meta.get("iter")
    if not isinstance(iteration, int):
        iteration = _iteration_from_name(checkpoint)
    return model, iteration


def _iteration_from_name(checkpoint: Path) -> int:
    try:
        return int(checkpoint.stem.split("_", 1)[1])
    except (IndexError, ValueError):
        print(f"warning: {checkpoint} records no iteration", file=sys.stderr)
        return -1
