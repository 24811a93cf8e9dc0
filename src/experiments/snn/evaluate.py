"""Evaluate an SNN run's checkpoint: accuracy, loss, images/s and a confusion matrix.

The model is rebuilt from the run's own recorded config (`.hydra/config.yaml`) through the
same plan a single-process run of that config would get, so the builder, the data, the input
layout and SpikingJelly's forward/loss helpers are the ones training used. Sharded checkpoints
(TP, PP) are merged by the model's own builder (`merge_state_dicts`, which refuses shards that
overlap or leave a gap); FSDP2 and DDP checkpoints already hold full tensors.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.errors import ConfigError, EvaluationError
from experiments.run import checkpoint as checkpoints
from experiments.run.record import read_summary, write_json_atomic
from experiments.run.recorded_run import (
    ONE_LOCAL_PROCESS,
    override_value,
    read_choices,
    read_config,
    set_one_local_process,
)

EVAL_FILE = "eval.json"
CONFUSION_FILE = "eval_confusion.png"
# SpikingJelly's loaders always ask for pinned memory; there is nothing to pin on the CPU.
warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true.*")
# What an evaluation may change; the model and its training are the run's.
OVERRIDABLE = ("data.", "trainer.batch_size", "trainer.workers")
# Training-only settings a CPU evaluation of a CUDA run leaves at their CPU values.
CPU_TRAINER = {
    "engine": "auto",
    "device": "cpu",  # trainer=classify
    "precision": "fp32",
    "execution_mode": "eager",
    "memopt_level": 0,
    "profile_steps": 0,
}


@dataclass
class Evaluated:
    loss: float
    accuracy: float
    images: int
    seconds: float
    confusion: torch.Tensor  # [true class, predicted class] counts


def evaluate_run(run_dir: Path, checkpoint: Path | None, overrides: list[str]) -> int:
    cfg = _config(run_dir, overrides)
    plan = _plan(run_dir, cfg)
    model, path, step = load_model(plan, run_dir, checkpoint)
    print(f"Evaluating {path} (step {step}) on data={plan.choices.get('data')} ...")
    result = _evaluate(plan, model)
    measured = _spikes(plan, model, step)
    summary = read_summary(run_dir) or {}
    record = {
        "run_dir": str(run_dir),
        "checkpoint": str(path),
        "step": step,
        "engine": summary.get("engine"),
        "model": summary.get("model"),
        "data": OmegaConf.to_container(cfg.data, resolve=True),
        "overrides": overrides,
        "val_accuracy": result.accuracy,
        "val_loss": result.loss,
        "images": result.images,
        "images_per_second": result.images / result.seconds if result.seconds else None,
        "confusion_matrix": result.confusion.tolist(),
        "per_class_accuracy": _per_class(result.confusion),
        # what training recorded for its final checkpoint, to compare at a glance
        "run_val_accuracy": summary.get("metrics", {}).get("val_accuracy"),
        # the run's spike and energy measurement, on its slice, for this checkpoint
        **({"spikes": measured} if measured is not None else {}),
    }
    write_json_atomic(run_dir / EVAL_FILE, record)
    figure = _confusion_figure(result.confusion, run_dir / CONFUSION_FILE, record)
    print(
        f"  val_accuracy  {result.accuracy:.4f}"
        + (
            f" (the run recorded {record['run_val_accuracy']:.4f})"
            if isinstance(record["run_val_accuracy"], float)
            else ""
        )
        + f"\n  val_loss      {result.loss:.4f}\n"
        f"  images        {result.images} ({record['images_per_second']:.1f} images/s)\n"
        + _spike_lines(measured)
        + f"  written       {run_dir / EVAL_FILE}, {figure}"
    )
    return 0


def _spikes(plan: Any, model: torch.nn.Module, step: int) -> dict[str, Any] | None:
    """The run's spike and energy measurement (snn/spikes.py: its settings, its slice of the
    validation data) on this checkpoint's single-process model; None when the run has it off."""
    from spikingjelly.activation_based.distributed.vision import training as sj_training
    from spikingjelly.activation_based.distributed.vision.execution import (
        _forward_classification,
    )

    from experiments.snn import spikes

    settings = plan.spikes
    if settings is None or not settings.active:
        return None
    config = plan.training_config
    _, loader, _, _ = sj_training._build_loaders(config, dp_size=1, dp_rank=0)
    indices = spikes.slice_indices(len(loader.dataset), settings.images, settings.seed)
    # one forward for the slice, as the training loop measures it (spikingjelly_spikes.py)
    batches = list(spikes.batches_of(loader.dataset, indices, max(len(indices), 1)))
    model_config = config.model

    def forward(images: torch.Tensor) -> torch.Tensor:
        return _forward_classification(
            model, images, model_config.time_steps, model_config.step_mode, config.input_layout
        )

    counts = spikes.measure(model, batches, forward, settings)
    summary = spikes.local_summary(counts)
    record = spikes.combine([(0, summary)], settings, spikes.spiking_layers(model), step, None)
    return {**spikes.constants(settings), **record}


def _spike_lines(measured: dict[str, Any] | None) -> str:
    if measured is None:
        return ""
    quiet = [layer["layer"] for layer in measured["layers"] if layer["firing_rate"] == 0]
    return (
        f"  firing rate   {measured['firing_rate']:.4f} over {len(measured['layers'])} spiking "
        f"layers ({measured['images']} images)"
        + (f"; silent: {', '.join(quiet)}" if quiet else "")
        + f"\n  energy        {measured['energy_per_image_mj']:.4g} mJ per image "
        f"({measured['synops_per_image']:.4g} synaptic operations, "
        f"{measured['macs_per_image']:.4g} MACs)\n"
    )


def _config(run_dir: Path, overrides: list[str]) -> DictConfig:
    """The run's recorded config with the evaluation's overrides, on one CPU process."""
    cfg = read_config(run_dir)
    for override in overrides:
        key, _, text = override.partition("=")
        if not key.startswith(OVERRIDABLE):
            raise ConfigError(
                key,
                text,
                "an evaluation changes only its data and batching: data.<key>=..., "
                "trainer.batch_size=N or trainer.workers=N (the model is the run's)",
            )
        if OmegaConf.select(cfg, key, default=None) is None and key.count(".") == 1:
            group, name = key.split(".")
            if name not in cfg[group]:
                valid = ", ".join(sorted(str(k) for k in cfg[group]))
                raise ConfigError(key, text, f"not a key of this run's {group}; valid: {valid}")
        OmegaConf.update(cfg, key, override_value(text), merge=True)
    set_one_local_process(cfg, cleared=("resume",))
    with open_dict(cfg):
        for key, value in CPU_TRAINER.items():
            if key in cfg.trainer:
                cfg.trainer[key] = value
    return cfg


def _plan(run_dir: Path, cfg: DictConfig) -> Any:
    """The plan a single-process run of this config gets: its builder, data and layout."""
    from experiments.composition import _resolve
    from experiments.snn.plan import build_snn_plan

    choices = read_choices(run_dir)
    choices.update(ONE_LOCAL_PROCESS)
    return build_snn_plan(cfg, _resolve(cfg), run_dir, [], choices, [])


def load_model(
    plan: Any, run_dir: Path, checkpoint: Path | None
) -> tuple[torch.nn.Module, Path, int]:
    """The single-process model with a checkpoint's weights: the one named (a step folder,
    a classic Trainer .pth, or a file experiments-export wrote), else the newest readable."""
    from experiments.run.exported import is_exported

    if checkpoint is not None and is_exported(checkpoint):
        model = _build_model(plan)
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as error:
            raise EvaluationError(
                f"{checkpoint} does not fit this run's model: {str(error).splitlines()[0]}"
            ) from None
        from experiments.run.exported import read_sidecar

        return model, checkpoint, int(read_sidecar(checkpoint)["step"])
    if plan.engine == "classify":
        return _load_classify(plan, run_dir, checkpoint)
    return _load_newest_readable(plan, run_dir, checkpoint)


def _build_model(plan: Any) -> torch.nn.Module:
    from experiments.snn.models import build_single_process_model

    config = plan.training_config
    return build_single_process_model(config.model, torch.device("cpu"), config.batch_size)


def _merged(plan: Any, pipeline: int, tensor: int, shard: Callable[[int, int], dict]) -> dict:
    """The (pp, tp) shards' model states merged into the canonical names by the model's
    builder."""
    shards = [(pp, tp, shard(pp, tp)) for pp in range(pipeline) for tp in range(tensor)]
    model = plan.training_config.model
    builder = model.get_builder_cls()(model)
    return builder.merge_state_dicts(shards, pipeline_size=pipeline, tensor_size=tensor)


def _merged_state(plan: Any, path: Path) -> tuple[dict[str, torch.Tensor], int]:
    import json

    meta = json.loads((path / checkpoints.META).read_text(encoding="utf-8"))
    _, pipeline, tensor = meta.get("mesh", {}).get("shape", [1, 1, 1])

    def shard(pp: int, tp: int) -> dict:
        name = checkpoints.shard_name(pp, tp)
        return torch.load(path / name, map_location="cpu", weights_only=True)["model"]

    return _merged(plan, pipeline, tensor, shard), int(meta["step"])


def _library_state(plan: Any, path: Path) -> tuple[dict, int]:
    """One of SpikingJelly's DCP checkpoints: each (pp, tp) folder's full model state (the
    library saves with full_state_dict=True), read without a process group, then merged by
    the model's builder. Its pp x tp is its own recipe's (a run resumed under another
    topology holds checkpoints of both)."""
    from experiments.snn.engines.spikingjelly_checkpoints import (
        checkpoint_step,
        read_recipe,
        read_shard,
        shard_folder,
        torn_reason,
    )

    reason = torn_reason(path)
    if reason is not None:
        raise EvaluationError(f"{path} is not a complete SpikingJelly checkpoint ({reason})")
    recipe = read_recipe(path)
    pipeline, tensor = recipe["pipeline_parallel_size"], recipe["tensor_parallel_size"]
    merged = _merged(
        plan, pipeline, tensor, lambda pp, tp: read_shard(path / shard_folder(pp, tp))["model"]
    )
    return merged, checkpoint_step(path)


def _load_newest_readable(
    plan: Any, run_dir: Path, chosen: Path | None
) -> tuple[torch.nn.Module, Path, int]:
    # SpikingJelly's own loop wrote its step_N/ (config.json, a DCP folder per (pp, tp) rank);
    # else our retired CPU engine did (a .pt shard per (pp, tp) rank, meta.json)
    library = (read_summary(run_dir) or {}).get("engine") == "spikingjelly"
    if chosen is not None:
        if not library and not (chosen / checkpoints.META).is_file():
            raise ConfigError(
                "checkpoint",
                str(chosen),
                f"a complete checkpoint directory, e.g. {run_dir}/checkpoints/step_00000050",
            )
        candidates = [chosen]
    elif library:
        from experiments.snn.engines.spikingjelly_checkpoints import scan_checkpoints

        candidates, _ = scan_checkpoints(run_dir / "checkpoints")
    else:
        candidates = checkpoints.complete_checkpoints(run_dir / "checkpoints")
    if not candidates:
        raise EvaluationError(f"{run_dir} has no complete checkpoint in checkpoints/")
    read = _library_state if library else _merged_state
    return _first_loadable(plan, candidates, lambda path: read(plan, path))


def _load_classify(
    plan: Any, run_dir: Path, chosen: Path | None
) -> tuple[torch.nn.Module, Path, int]:
    """A trainer=classify run: the Trainer's own .pth files, its latest first, then each
    epoch's newest first (`checkpoint_max_test_acc1.pth` only when named)."""
    from experiments.snn import classify_plan

    folder = classify_plan.checkpoint_dir(run_dir)
    if chosen is not None:
        if classify_plan.resume_file(chosen) is None:
            raise ConfigError(
                "checkpoint",
                str(chosen),
                f"a .pth file the Trainer wrote, e.g. {folder}/{classify_plan.LATEST}",
            )
        candidates = [classify_plan.resume_file(chosen)]
    else:
        epochs = sorted(
            folder.glob("checkpoint_[0-9]*.pth"),
            key=lambda path: int(path.stem.rpartition("_")[2]),
            reverse=True,
        )
        candidates = [path for path in (folder / classify_plan.LATEST, *epochs) if path.is_file()]
        if not candidates:
            raise EvaluationError(f"{run_dir} has no checkpoint in {folder}")
    return _first_loadable(plan, candidates, classify_plan.load_checkpoint)


def _first_loadable(
    plan: Any,
    candidates: list[Path],
    read: Callable[[Path], tuple[dict[str, torch.Tensor], int]],
) -> tuple[torch.nn.Module, Path, int]:
    """The model with the first candidate that loads (newest first): a torn or foreign
    checkpoint is reported and the previous one tried; none loading is an error."""
    model = _build_model(plan)
    problems = []
    for path in candidates:
        try:
            state, step = read(path)
            model.load_state_dict(state, strict=True)
            return model, path, step
        except Exception as error:  # a truncated or foreign file raises many types
            problems.append(f"{path.name}: {type(error).__name__}: {error}")
            if path != candidates[-1]:  # the last one's problem is the error below
                print(
                    f"warning: cannot load {path} ({problems[-1]}); trying the previous one",
                    file=sys.stderr,
                )
    raise EvaluationError("no checkpoint can be loaded: " + "; ".join(problems))


def _evaluate(plan: Any, model: torch.nn.Module) -> Evaluated:
    """SpikingJelly's own validation (training.py `_evaluate`), also keeping predictions."""
    from spikingjelly.activation_based import functional
    from spikingjelly.activation_based.distributed.vision import training as sj_training
    from spikingjelly.activation_based.distributed.vision.execution import (
        _classification_loss,
        _forward_classification,
    )
    from tqdm import tqdm

    config = plan.training_config
    _, loader, _, _ = sj_training._build_loaders(config, dp_size=1, dp_rank=0)
    loss_function = sj_training._build_loss_function(config)
    if plan.engine == "classify":  # the Trainer's criterion, so val_loss is the run's too
        smoothing = float(plan.trainer.get("label_smoothing") or 0.0)
        loss_function = torch.nn.CrossEntropyLoss(label_smoothing=smoothing)
    classes = config.model.num_classes
    confusion = torch.zeros(classes, classes, dtype=torch.long)
    totals = torch.zeros(3, dtype=torch.float64)
    model.eval()
    started = time.perf_counter()
    with torch.inference_mode():
        for images, targets in tqdm(loader, desc="eval", unit="batch", leave=False, disable=None):
            logits = _forward_classification(
                model,
                images,
                config.model.time_steps,
                config.model.step_mode,
                config.input_layout,
            )
            loss = _classification_loss(logits, targets, loss_function)
            predictions = logits.argmax(1)
            totals[0] += loss.double() * targets.numel()
            totals[1] += (predictions == targets).sum().double()
            totals[2] += targets.numel()
            confusion.index_put_((targets, predictions), torch.ones_like(targets), accumulate=True)
            functional.reset_net(model)
    seconds = time.perf_counter() - started
    return Evaluated(
        loss=(totals[0] / totals[2]).item(),
        accuracy=(totals[1] / totals[2]).item(),
        images=int(totals[2].item()),
        seconds=seconds,
        confusion=confusion,
    )


def _per_class(confusion: torch.Tensor) -> list[float | None]:
    counts = confusion.sum(1)
    return [(confusion[k, k] / counts[k]).item() if counts[k] else None for k in range(len(counts))]


def _confusion_figure(confusion: torch.Tensor, path: Path, record: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = confusion.shape[0]
    size = max(4.0, 0.45 * classes + 2)
    figure, axes = plt.subplots(figsize=(size, size * 0.9))
    shown = axes.imshow(confusion.numpy(), cmap="Blues")
    figure.colorbar(shown, ax=axes, fraction=0.046)
    if classes <= 20:
        peak = int(confusion.max()) or 1
        for true in range(classes):
            for predicted in range(classes):
                count = int(confusion[true, predicted])
                if count:
                    axes.text(
                        predicted,
                        true,
                        str(count),
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if count > peak / 2 else "black",
                    )
        axes.set_xticks(range(classes))
        axes.set_yticks(range(classes))
    axes.set_xlabel("predicted class")
    axes.set_ylabel("true class")
    axes.set_title(
        f"{record['model']} step {record['step']}: accuracy {record['val_accuracy']:.3f}",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
