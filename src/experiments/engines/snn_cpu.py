"""CPU engine for SNN classification: the same TrainingConfig SpikingJelly's trainer takes.

SpikingJelly's `train_classification` needs CUDA and NCCL. This engine runs its pieces on the
CPU instead of re-implementing them: the config's ModelBuilder builds the model, SpikingJelly's
loaders shard the data, its execution helpers run forward and loss, `functional.reset_net`
resets neuron state, its `_evaluate` computes validation metrics. What is ours: the loop, the
progress bar, checkpoints in the run directory and the record.
"""

from __future__ import annotations

import logging
import math
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from spikingjelly.activation_based import functional
from spikingjelly.activation_based.distributed.vision import training as sj_training
from spikingjelly.activation_based.distributed.vision.execution import (
    _classification_loss,
    _forward_classification,
)
from spikingjelly.activation_based.precision import prepare_model_for_precision
from tqdm import tqdm

from experiments.plan import CHECKPOINT_DIRNAME, RunPlan
from experiments.run import checkpoint
from experiments.run.record import RunRecorder

log = logging.getLogger(__name__)
DEVICE = torch.device("cpu")

# SpikingJelly's loaders always ask for pinned memory; there is nothing to pin on a CPU run.
warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true.*")


def peak_memory_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train(plan: RunPlan, recorder: RunRecorder) -> dict[str, Any]:
    config = plan.training_config
    dims = plan.dims
    rank = 0
    dp_rank, pp_rank, tp_rank = dims.coordinates(rank)
    is_leader = rank == 0
    torch.manual_seed(config.seed)
    builder = config.model.get_builder_cls()(config.model)
    model, _fsdp_roots, _, _ = builder.build(
        process_group=None,
        memopt_process_group=None,
        pipeline_rank=pp_rank,
        pipeline_size=dims.pipeline_parallel_size,
        pipeline_microbatches=dims.pipeline_microbatches,
        device=DEVICE,
        micro_batch_size=config.batch_size,
        memopt_level=0,
        memopt_compress_inputs=False,
        memopt_checkpoint_budget="memory",
    )
    functional.set_step_mode(model, config.model.step_mode)
    precision = prepare_model_for_precision(model, DEVICE, config.precision)
    model = precision.model
    optimizer = sj_training._import_object(config.optimizer)(
        model.parameters(), **config.optimizer_kwargs
    )
    scheduler = (
        sj_training._import_object(config.scheduler)(optimizer, **config.scheduler_kwargs)
        if config.scheduler
        else None
    )
    loss_function = sj_training._build_loss_function(config)
    train_loader, val_loader, train_sampler, _ = sj_training._build_loaders(
        config, dp_size=dims.data_parallel_size, dp_rank=dp_rank
    )

    def forward(images: torch.Tensor) -> torch.Tensor:
        return _forward_classification(
            model, images, config.model.time_steps, config.model.step_mode, config.input_layout
        )

    recipe = sj_training._recipe(config)
    shard = checkpoint.shard_name(pp_rank, tp_rank)
    root = plan.run_dir / CHECKPOINT_DIRNAME
    step = epoch = batch_in_epoch = 0
    resumed_from = _resume(plan, root, shard, recipe, model, optimizer, scheduler)
    if resumed_from is not None:
        path, progress = resumed_from
        step, epoch, batch_in_epoch = progress
        recorder.summary["resumed_from"] = str(path)
        recorder.summary["resumes"] = recorder.summary.get("resumes", 0) + 1
        log.info("resumed from %s at step %d", path, step)
    steps_per_epoch = len(train_loader)
    epoch += batch_in_epoch // steps_per_epoch
    batch_in_epoch %= steps_per_epoch
    total_steps = config.epochs * steps_per_epoch
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)

    def save(at_step: int, at_epoch: int, at_batch: int) -> None:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else {},
            "rng": {"torch": torch.get_rng_state()},
        }
        meta = {
            "epoch": at_epoch,
            "batch_in_epoch": at_batch,
            "recipe": recipe,
            "mesh": dims.as_dict(),
        }
        checkpoint.save(
            root,
            at_step,
            state,
            meta,
            shard=shard,
            is_writer=dp_rank == 0,
            is_leader=is_leader,
            barrier=lambda: None,
            keep=plan.trainer["keep_checkpoints"],
        )

    global_batch = config.batch_size * dims.data_parallel_size
    train_seconds = 0.0
    timed_images = 0
    last_loss = math.nan
    val_loss = val_accuracy = math.nan
    saved_step = step
    bar = tqdm(
        total=total_steps,
        initial=step,
        unit="step",
        disable=not is_leader,
        dynamic_ncols=True,
        mininterval=1.0 if sys.stderr.isatty() else 15.0,
    )
    model.train()
    while epoch < config.epochs and step < total_steps:
        train_sampler.set_epoch(epoch)
        bar.set_description(f"epoch {epoch + 1}/{config.epochs}")
        epoch_loss = torch.zeros((), dtype=torch.float64)
        epoch_samples = 0
        epoch_started_images, epoch_started_seconds = timed_images, train_seconds
        for index, (images, targets) in enumerate(train_loader):
            if index < batch_in_epoch:
                continue  # resume mid-epoch: same sampler order, skip what was trained
            started = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = _classification_loss(forward(images), targets, loss_function)
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            functional.reset_net(model)
            train_seconds += time.perf_counter() - started
            timed_images += targets.numel() * dims.data_parallel_size
            step += 1
            last_loss = loss.item()
            epoch_loss += last_loss * targets.numel()
            epoch_samples += targets.numel()
            bar.update(1)
            bar.set_postfix(
                loss=f"{last_loss:.4f}", img_s=f"{timed_images / train_seconds:.0f}", refresh=False
            )
            if step % plan.trainer["log_every_n_steps"] == 0:
                recorder.scalar("train/loss", last_loss, step)
            if config.checkpoint_interval and step % config.checkpoint_interval == 0:
                save(step, epoch, index + 1)
                saved_step = step
            if step >= total_steps:
                break
        batch_in_epoch = 0
        epoch += 1
        val_loss, val_accuracy = sj_training._evaluate(
            model,
            val_loader,
            device=DEVICE,
            precision=precision,
            loss_function=loss_function,
            dp_group=None,
            dp_size=1,
            sync_buffers=False,
            forward_step=forward,
        )
        epoch_seconds = train_seconds - epoch_started_seconds
        recorder.log_metrics(
            {
                "step": step,
                "epoch": epoch,
                "train_loss": (epoch_loss / max(epoch_samples, 1)).item(),
                "val_loss": val_loss,
                "val_accuracy": val_accuracy,
                "images_per_second": (timed_images - epoch_started_images)
                / max(epoch_seconds, 1e-9),
                "peak_memory_mb": peak_memory_mb(),
                "lr": optimizer.param_groups[0]["lr"],
            }
        )
        bar.write(f"epoch {epoch}: val_accuracy={val_accuracy:.4f} val_loss={val_loss:.4f}")
    bar.close()
    if step != saved_step:
        save(step, epoch, 0)
    return {
        "val_accuracy": val_accuracy,
        "val_loss": val_loss,
        "train_loss": last_loss,
        "images_per_second": timed_images / train_seconds if train_seconds else 0.0,
        "steps": step,
        "global_batch": global_batch,
        "peak_memory_mb": peak_memory_mb(),
    }


def _resume(
    plan: RunPlan,
    root: Path,
    shard: str,
    recipe: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
) -> tuple[Path, tuple[int, int, int]] | None:
    if plan.resume is None:
        return None
    if plan.resume == "auto":
        found = checkpoint.load_latest(root, shard, recipe)
        if found is None:
            return None
        path, state, meta = found
    else:
        path = Path(plan.resume)
        state, meta = checkpoint.load(path, shard, recipe)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    return path, (int(meta["step"]), int(meta["epoch"]), int(meta["batch_in_epoch"]))
