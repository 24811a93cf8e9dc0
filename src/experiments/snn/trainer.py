"""The trainer group for SNN runs (conf/trainer/default.yaml; trainer=classify is
snn/classify_plan.py): its keys checked, and which engine and device a run gets
(`trainer.engine=auto`: SpikingJelly's train_classification where the ranks have CUDA, our
CPU engine otherwise)."""

from __future__ import annotations

from typing import Any

import torch

from experiments import data as data_group
from experiments import validation as check
from experiments.errors import ConfigError
from experiments.topology import ParallelDims
from experiments.validation import arguments as check_args

ENGINES = ("auto", "spikingjelly", "cpu")
PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
EXECUTION_MODES = ("eager", "compile", "cuda_graph")


def checked(trainer: dict[str, Any]) -> dict[str, Any]:
    check.integer(trainer["epochs"], "trainer.epochs", minimum=1)
    check.optional_integer(trainer["max_steps"], "trainer.max_steps", minimum=1)
    check.integer(trainer["batch_size"], "trainer.batch_size", minimum=1)
    check.integer(trainer["workers"], "trainer.workers", minimum=0)
    check.integer(trainer["checkpoint_interval"], "trainer.checkpoint_interval", minimum=0)
    check.integer(trainer["keep_checkpoints"], "trainer.keep_checkpoints", minimum=1)
    check.integer(trainer["log_every_n_steps"], "trainer.log_every_n_steps", minimum=1)
    check.integer(trainer["profile_steps"], "trainer.profile_steps", minimum=0)
    check.choice(trainer["engine"], "trainer.engine", ENGINES)
    check.choice(trainer["precision"], "trainer.precision", PRECISIONS)
    check.choice(trainer["execution_mode"], "trainer.execution_mode", EXECUTION_MODES)
    check.integer(trainer["memopt_level"], "trainer.memopt_level", minimum=0, maximum=4)
    if trainer["scheduler"] is not None:
        cls = data_group.import_object(str(trainer["scheduler"]), "trainer.scheduler")
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.LRScheduler)):
            raise ConfigError(
                "trainer.scheduler",
                trainer["scheduler"],
                "a torch.optim.lr_scheduler class path, e.g. torch.optim.lr_scheduler.StepLR",
            )
        check_args(cls, trainer["scheduler_kwargs"] or {}, "trainer.scheduler_kwargs.", 1)
    elif trainer["scheduler_kwargs"]:
        raise ConfigError(
            "trainer.scheduler_kwargs",
            trainer["scheduler_kwargs"],
            "{} without trainer.scheduler (set a scheduler class, or drop its arguments)",
        )
    return trainer


def engine_and_device(trainer: dict[str, Any], has_cuda: bool, launcher: str) -> tuple[str, str]:
    """(engine, device). `auto` is SpikingJelly's train_classification where the ranks have
    CUDA and our CPU engine otherwise; `spikingjelly` without CUDA runs the library's own loop
    on CPU ranks over gloo (its CUDA-only calls mapped inside our processes:
    engines/spikingjelly_cpu.py)."""
    engine = trainer["engine"]
    if engine == "auto":
        engine = "spikingjelly" if has_cuda else "cpu"
    device = "cuda" if engine == "spikingjelly" and has_cuda else "cpu"
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
                    f"on CPU ranks both engines run {key}={default}",
                )
    if engine == "spikingjelly" and trainer["profile_steps"]:
        raise ConfigError(
            "trainer.profile_steps",
            trainer["profile_steps"],
            "0: SpikingJelly's train_classification has no profiler hook; profiling is "
            "for trainer.engine=cpu",
        )
    return engine, device


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
