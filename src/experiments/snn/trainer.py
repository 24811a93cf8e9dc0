"""The trainer group for SNN runs (conf/trainer/default.yaml; trainer=classify is
snn/classify_plan.py): its keys checked, and the device a run gets. Every run of this group
trains with SpikingJelly's own `train_classification`: on CUDA where the launcher's ranks
have it, on CPU ranks otherwise (engines/spikingjelly.py)."""

from __future__ import annotations

from typing import Any

import torch

from experiments import data as data_group
from experiments.errors import ConfigError
from experiments.topology import ParallelDims
from experiments.validation import arguments as check_args

ENGINE = "spikingjelly"


def checked(trainer: dict[str, Any]) -> dict[str, Any]:
    """What the trainer's schema cannot check without torch (schemas/trainer.py checks the
    keys' types, ranges and rules): the scheduler is a torch lr_scheduler, and its
    arguments are ones it takes."""
    if trainer["scheduler"] is not None:
        cls = data_group.import_object(str(trainer["scheduler"]), "trainer.scheduler")
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.LRScheduler)):
            raise ConfigError(
                "trainer.scheduler",
                trainer["scheduler"],
                "a torch.optim.lr_scheduler class path, e.g. torch.optim.lr_scheduler.StepLR",
            )
        check_args(cls, trainer["scheduler_kwargs"] or {}, "trainer.scheduler_kwargs.", 1)
    return trainer


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
