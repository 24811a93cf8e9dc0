"""The trainer group for SNN runs (conf/trainer/default.yaml; trainer=classify is
snn/classify_plan.py): its keys checked, and the device a run gets. Every run of this group
trains with SpikingJelly's own `train_classification`: on CUDA where the launcher's ranks
have it, on CPU ranks otherwise (engines/spikingjelly.py)."""

from __future__ import annotations

from typing import Any

import torch

from experiments import data as data_group
from experiments import validation as check
from experiments.errors import ConfigError
from experiments.snn import mixup
from experiments.snn.epoch_schedule import EpochSchedule, is_timm
from experiments.topology import ParallelDims
from experiments.validation import arguments as check_args

ENGINE = "spikingjelly"


def checked(trainer: dict[str, Any]) -> dict[str, Any]:
    """What the trainer's schema cannot check without importing what its keys name
    (schemas/trainer.py checks the keys' types, ranges and the rules between them): the
    scheduler and the loss function with their arguments, and mixup's keys against the loop's
    own mixup (snn/mixup.py)."""
    _check_scheduler(trainer)
    _check_loss(trainer)
    mixup.checked(trainer)
    return trainer


def _check_scheduler(trainer: dict[str, Any]) -> None:
    if trainer["scheduler"] is None:  # (its arguments without it: the schema's rule)
        return
    cls = data_group.import_object(str(trainer["scheduler"]), "trainer.scheduler")
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.LRScheduler)):
        raise ConfigError(
            "trainer.scheduler",
            trainer["scheduler"],
            "a torch.optim.lr_scheduler class path, e.g. torch.optim.lr_scheduler.StepLR",
        )
    kwargs = dict(trainer["scheduler_kwargs"] or {})
    if cls is EpochSchedule:
        _check_epoch_schedule(kwargs, int(trainer["epochs"]))
    else:
        check_args(cls, kwargs, "trainer.scheduler_kwargs.", 1)


def _check_epoch_schedule(kwargs: dict[str, Any], epochs: int) -> None:
    """EpochSchedule's own keys, then the paper's scheduler's arguments against its class."""
    prefix = "trainer.scheduler_kwargs."
    steps = kwargs.pop("steps_per_epoch", "auto")
    if steps != "auto":
        check.integer(steps, f"{prefix}steps_per_epoch", minimum=1)
    path = kwargs.pop("schedule", None)
    if path is None:
        raise ConfigError(
            f"{prefix}schedule",
            None,
            "the scheduler stepped once per epoch, e.g. timm.scheduler.CosineLRScheduler or "
            "torch.optim.lr_scheduler.CosineAnnealingLR",
        )
    inner = data_group.import_object(str(path), f"{prefix}schedule")
    torch_class = isinstance(inner, type) and issubclass(
        inner, torch.optim.lr_scheduler.LRScheduler
    )
    if not (torch_class or is_timm(inner)):
        raise ConfigError(
            f"{prefix}schedule",
            path,
            "a torch.optim.lr_scheduler or timm.scheduler class path, e.g. "
            "timm.scheduler.CosineLRScheduler",
        )
    check_args(inner, kwargs, prefix, 1)
    length = kwargs.get("T_max")
    cosine = inner is torch.optim.lr_scheduler.CosineAnnealingLR
    if cosine and isinstance(length, int) and length < epochs:
        raise ConfigError(
            f"{prefix}T_max",
            length,
            f"a number >= trainer.epochs={epochs}: stepped once per epoch, the cosine "
            f"reaches its minimum at epoch {length} and climbs back up",
        )


def _check_loss(trainer: dict[str, Any]) -> None:
    """SpikingJelly's loss_function and loss_kwargs: the function is called as
    `function(logits, targets, **loss_kwargs)`."""
    function = data_group.import_object(str(trainer["loss_function"]), "trainer.loss_function")
    if not callable(function):
        raise ConfigError(
            "trainer.loss_function",
            trainer["loss_function"],
            "a function (logits, targets) -> loss, e.g. torch.nn.functional.cross_entropy",
        )
    kwargs = trainer["loss_kwargs"]
    check.call_arguments(function, kwargs, "trainer.loss_kwargs.", 2)
    smoothing = kwargs.get("label_smoothing", 0.0)
    if (
        isinstance(smoothing, bool)
        or not isinstance(smoothing, (int, float))
        or not (0 <= smoothing < 1)
    ):
        raise ConfigError(
            "trainer.loss_kwargs.label_smoothing", smoothing, "from 0 to < 1, e.g. 0.1"
        )


def engine_and_device(trainer: dict[str, Any], has_cuda: bool, launcher: str) -> tuple[str, str]:
    """(engine, device): SpikingJelly's train_classification, on CUDA where the ranks have it
    and on CPU ranks otherwise (its CUDA-only calls mapped inside our processes:
    engines/spikingjelly_cpu.py), where only its fp32 eager path runs."""
    device = "cuda" if has_cuda else "cpu"
    if device == "cpu":
        for key, value, default in (
            ("precision", trainer["precision"], "fp32"),
            ("execution_mode", trainer["execution_mode"], "eager"),
            ("memopt_level", trainer["memopt_level"], 0),
        ):
            if value != default:
                where = "launcher.gpus_per_node is 0" if launcher == "slurm" else "no CUDA here"
                raise ConfigError(
                    f"trainer.{key}",
                    value,
                    f"needs CUDA (SpikingJelly's train_classification on GPUs; {where}); "
                    f"on CPU ranks it runs {key}={default}",
                )
    return ENGINE, device


def check_cuda_graph(trainer: dict[str, Any], dims: ParallelDims) -> None:
    """SpikingJelly's loop raises at run time for a CUDA graph over more than one rank
    (training.py: "Vision CUDA Graph requires a single-rank process"): refused here."""
    if trainer.get("execution_mode") == "cuda_graph" and dims.world_size > 1:
        raise ConfigError(
            "trainer.execution_mode",
            "cuda_graph",
            f"needs a single-rank run (world size here: {dims.world_size}); SpikingJelly's "
            "train_classification captures CUDA graphs on one rank only: use eager or compile",
        )


def derive_batch(trainer: dict[str, Any], dims: Any) -> dict[str, Any]:
    """trainer.global_batch_size split over the data-parallel ranks, so single, ddp x2 or
    fsdp2 x4 optimise over the same global batch (DistributedSampler interleaves indices)."""
    total, cap = trainer["global_batch_size"], trainer["batch_size"]
    dp = dims.data_parallel_size
    if total % dp:
        fits = [n for n in (total - total % dp, total - total % dp + dp) if n > 0]
        raise ConfigError(
            "trainer.global_batch_size",
            total,
            f"a multiple of the data-parallel size {dp} ({dims.describe()}), e.g. "
            + " or ".join(f"trainer.global_batch_size={n}" for n in fits),
        )
    per_rank = total // dp
    steps = next(a for a in range(1, per_rank + 1) if per_rank % a == 0 and per_rank // a <= cap)
    return {
        "batch_size": per_rank,
        "accumulation_steps": steps,
        "micro_batch_size": per_rank // steps,
        "batch_size_cap": cap,
        "derivation": (
            f"trainer.global_batch_size={total} / data-parallel {dp} = {per_rank} per rank"
            + (
                f", in {steps} accumulation steps of {per_rank // steps} "
                f"(trainer.batch_size={cap} at most per forward)"
                if steps > 1
                else ""
            )
        ),
    }


def check_accumulation(trainer: dict[str, Any], dims: Any) -> None:
    """Gradient accumulation runs inside SpikingJelly's training step (engines/accumulation.py);
    a pipeline splits its batch into micro-batches of its own instead, and a CUDA graph
    replays one captured forward and backward per step."""
    steps = trainer.get("accumulation_steps", 1)
    if steps == 1:
        return
    per_rank = trainer["batch_size"]
    if trainer.get("execution_mode") == "cuda_graph":
        raise ConfigError(
            "trainer.execution_mode",
            "cuda_graph",
            f"eager or compile: trainer.global_batch_size={trainer['global_batch_size']} "
            f"accumulates {steps} micro-batches a step, and a CUDA graph replays the one "
            f"forward and backward it captured (or trainer.batch_size={per_rank}: no "
            "accumulation)",
        )
    if dims.pipeline_parallel_size > 1:
        cap = trainer["batch_size_cap"]
        fits = next(m for m in range(1, per_rank + 1) if per_rank % m == 0 and per_rank // m <= cap)
        raise ConfigError(
            "trainer.batch_size",
            cap,
            f"{per_rank}: a pipeline splits the per-rank batch into micro-batches of its own "
            f"instead of accumulating; keep trainer.batch_size={per_rank} with "
            f"topology.pipeline_microbatches={fits} for forwards of {per_rank // fits}",
        )
