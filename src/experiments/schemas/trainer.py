"""`trainer=<name>`'s schemas: the nodes every trainer option shares (`trainer.spikes`,
`trainer.early_stopping`).

What these keys mean for a run is the code's that uses them (snn/spikes.py,
run/early_stopping.py); what depends on the family or the topology (which metrics a family
evaluates, how many images each rank measures) is checked there, where those are known.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from experiments.errors import ConfigError
from experiments.validation import integer, non_negative_number, optional_integer, positive_number


class EnergyCosts(StrEnum):
    """SpikingJelly's SimpleEnergyCostConfig presets (op_counter)."""

    fp32 = "fp32"  # E_MAC 4.6 pJ, E_AC 0.9 pJ
    fp16 = "fp16"
    int8 = "int8"


@dataclass
class SpikesConfig:
    """`trainer.spikes`: spike activity and energy after each evaluation (snn/spikes.py)."""

    images: Any  # the slice of the validation set: an integer >= 0 (0: off), or auto
    seed: int  # which validation images (the same at every evaluation)
    costs: EnergyCosts
    guard: int | None  # evaluations in a row a layer may stay silent or saturated; null: off

    def __post_init__(self) -> None:
        if self.images != "auto" and (
            isinstance(self.images, bool) or not isinstance(self.images, int) or self.images < 0
        ):
            raise ConfigError(
                "trainer.spikes.images", self.images, "an integer >= 0 or auto (0: off)"
            )
        integer(self.seed, "trainer.spikes.seed", minimum=0)
        if self.guard is not None and self.guard < 1:
            raise ConfigError(
                "trainer.spikes.guard",
                self.guard,
                "an integer >= 1 (evaluations in a row a layer may stay silent or saturated "
                "before the run stops), or null: off",
            )


class StopMode(StrEnum):
    auto = "auto"  # max for an accuracy, min for a loss
    max = "max"
    min = "min"


@dataclass
class EarlyStoppingConfig:
    """`trainer.early_stopping` (run/early_stopping.py resolves `auto` for the family)."""

    patience: int | None  # evaluations without improvement; null: off
    metric: str  # auto: the family's first monitored metric
    mode: StopMode
    min_delta: float  # a change of at most this much is no improvement

    def __post_init__(self) -> None:
        if self.patience is not None and self.patience < 1:
            raise ConfigError(
                "trainer.early_stopping.patience",
                self.patience,
                "an integer >= 1 (evaluations without improvement before stopping), or null: off",
            )
        if not self.min_delta >= 0:  # (NaN too)
            raise ConfigError(
                "trainer.early_stopping.min_delta", self.min_delta, "a number >= 0, e.g. 0.001"
            )


class Precision(StrEnum):
    """SpikingJelly's PrecisionConfig modes (all but fp32 need CUDA)."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"


class Fp8Recipe(StrEnum):
    """SpikingJelly's PrecisionConfig fp8 recipes (precision=fp8 only)."""

    auto = "auto"
    delayed = "delayed"
    current = "current"
    block = "block"
    mxfp8 = "mxfp8"


class ExecutionMode(StrEnum):
    eager = "eager"
    compile = "compile"  # torch.compile
    cuda_graph = "cuda_graph"  # CUDA, one rank


class MixupMode(StrEnum):
    """timm's Mixup modes (snn/mixup.py)."""

    batch = "batch"  # one draw per batch
    pair = "pair"  # per pair of images
    elem = "elem"  # per image


class MemoptBudget(StrEnum):
    """How much SpikingJelly's memopt recomputes."""

    speed = "speed"
    balanced = "balanced"
    memory = "memory"


# trainer.engine: auto (the family's library loop) or SpikingJelly's loop by name. A string
# rather than an enum: `cpu`, our retired loop, is refused with what replaced it.
ENGINES = ("auto", "spikingjelly")
RETIRED_ENGINE = (
    "auto: our CPU engine is gone; SpikingJelly's train_classification trains every "
    "run of trainer=default, on CPU ranks too (drop the override, or write "
    "trainer.engine=spikingjelly)"
)


@dataclass
class TrainerConfig:
    """trainer=default (conf/trainer/default.yaml): SpikingJelly's train_classification for
    SNN models (snn/trainer.py), MMGen's train_model for GANs (which leave its SNN keys at
    their defaults: gan/plan.py)."""

    epochs: int
    max_steps: int | None  # optimizer steps; stops early when reached
    batch_size: int  # per data-parallel rank
    global_batch_size: int | None  # split over the data-parallel ranks (snn/trainer.py)
    allow_global_batch_change: bool
    workers: int  # DataLoader workers per rank
    checkpoint_interval: int  # optimizer steps between checkpoints; 0: the last only
    keep_checkpoints: int
    engine: str  # one of ENGINES
    precision: Precision
    fp8_recipe: Fp8Recipe
    execution_mode: ExecutionMode
    memopt_level: int
    memopt_checkpoint_budget: MemoptBudget
    memopt_compress_inputs: bool
    scheduler: str | None  # a torch.optim.lr_scheduler class path
    scheduler_kwargs: dict[str, Any]  # its arguments (checked against it: snn/trainer.py)
    loss_function: str  # an import path, called as loss_function(logits, targets, **loss_kwargs)
    loss_kwargs: dict[str, Any]  # its arguments (checked against it: snn/trainer.py)
    mixup_alpha: float  # > 0: SpikingJelly's loop mixes every batch (Beta(alpha, alpha))
    cutmix_alpha: float  # timm's Mixup keys from here on (snn/mixup.py)
    mixup_prob: float
    mixup_switch_prob: float
    mixup_mode: MixupMode
    mixup_off_epoch: int | None  # N: only the first N epochs are mixed
    log_every_n_steps: int
    check_replicas: bool
    profile_steps: int  # 0: off
    spikes: SpikesConfig
    early_stopping: EarlyStoppingConfig

    def __post_init__(self) -> None:
        integer(self.epochs, "trainer.epochs", minimum=1)
        optional_integer(self.max_steps, "trainer.max_steps", minimum=1)
        integer(self.batch_size, "trainer.batch_size", minimum=1)
        optional_integer(self.global_batch_size, "trainer.global_batch_size", minimum=1)
        integer(self.workers, "trainer.workers", minimum=0)
        integer(self.checkpoint_interval, "trainer.checkpoint_interval", minimum=0)
        integer(self.keep_checkpoints, "trainer.keep_checkpoints", minimum=1)
        integer(self.log_every_n_steps, "trainer.log_every_n_steps", minimum=1)
        integer(self.profile_steps, "trainer.profile_steps", minimum=0)
        non_negative_number(self.mixup_alpha, "trainer.mixup_alpha")
        non_negative_number(self.cutmix_alpha, "trainer.cutmix_alpha")
        for key, probability in (
            ("mixup_prob", self.mixup_prob),
            ("mixup_switch_prob", self.mixup_switch_prob),
        ):
            if not 0 <= probability <= 1:
                raise ConfigError(f"trainer.{key}", probability, "a probability from 0 to 1")
        optional_integer(self.mixup_off_epoch, "trainer.mixup_off_epoch", minimum=1)
        if self.engine == "cpu":
            raise ConfigError("trainer.engine", "cpu", RETIRED_ENGINE)
        if self.engine not in ENGINES:
            raise ConfigError("trainer.engine", self.engine, "one of " + ", ".join(ENGINES))
        integer(self.memopt_level, "trainer.memopt_level", minimum=0, maximum=4)
        if self.fp8_recipe != Fp8Recipe.auto and self.precision != Precision.fp8:
            raise ConfigError(
                "trainer.fp8_recipe",
                self.fp8_recipe,
                f"auto (or trainer.precision=fp8: a recipe is fp8's; precision here: "
                f"{self.precision})",
            )
        if self.scheduler is None and self.scheduler_kwargs:
            raise ConfigError(
                "trainer.scheduler_kwargs",
                self.scheduler_kwargs,
                "{} without trainer.scheduler (set a scheduler class, or drop its arguments)",
            )


class Device(StrEnum):
    auto = "auto"  # cuda where the launcher's ranks have it
    cpu = "cpu"
    cuda = "cuda"


class LrScheduler(StrEnum):
    step = "step"
    cosa = "cosa"  # cosine annealing over the epochs after the warm-up
    exp = "exp"


class WarmupMethod(StrEnum):
    linear = "linear"
    constant = "constant"


class ClassifyPrecision(StrEnum):
    fp32 = "fp32"
    amp = "amp"  # fp16 autocast + GradScaler (CUDA)


@dataclass
class ClassifyTrainerConfig:
    """trainer=classify (conf/trainer/classify.yaml): SpikingJelly's classic
    train_classify.Trainer, its command-line options under our keys (snn/classify_plan.py
    builds its arguments)."""

    name: str  # classify: how the plan tells this trainer from the default one
    device: Device
    epochs: int
    batch_size: int  # per rank (-b)
    workers: int  # DataLoader workers per rank (-j)
    label_smoothing: float
    mixup_alpha: float
    cutmix_alpha: float
    lr_scheduler: LrScheduler
    lr_step_size: int
    lr_gamma: float
    lr_warmup_epochs: int
    lr_warmup_method: WarmupMethod
    lr_warmup_decay: float
    norm_weight_decay: float | None  # null: optimizer.weight_decay
    clip_grad_norm: float | None  # null: no clipping
    model_ema: bool
    model_ema_steps: int
    model_ema_decay: float
    sync_bn: bool
    test_only: bool
    precision: ClassifyPrecision
    execution_mode: ExecutionMode
    deterministic: bool
    spikes: SpikesConfig
    early_stopping: EarlyStoppingConfig

    def __post_init__(self) -> None:
        if self.name != "classify":
            raise ConfigError("trainer.name", self.name, "classify")
        integer(self.epochs, "trainer.epochs", minimum=1)
        integer(self.batch_size, "trainer.batch_size", minimum=1)
        integer(self.workers, "trainer.workers", minimum=0)
        non_negative_number(self.label_smoothing, "trainer.label_smoothing")
        non_negative_number(self.mixup_alpha, "trainer.mixup_alpha")
        non_negative_number(self.cutmix_alpha, "trainer.cutmix_alpha")
        non_negative_number(self.lr_warmup_decay, "trainer.lr_warmup_decay")
        non_negative_number(self.lr_gamma, "trainer.lr_gamma")
        if self.label_smoothing >= 1:
            raise ConfigError("trainer.label_smoothing", self.label_smoothing, "from 0 to < 1")
        integer(self.lr_step_size, "trainer.lr_step_size", minimum=1)
        integer(self.lr_warmup_epochs, "trainer.lr_warmup_epochs", minimum=0)
        if self.lr_scheduler == LrScheduler.cosa and self.lr_warmup_epochs >= self.epochs:
            raise ConfigError(
                "trainer.lr_warmup_epochs",
                self.lr_warmup_epochs,
                f"below trainer.epochs={self.epochs}: lr_scheduler=cosa anneals over the "
                "epochs after the warm-up",
            )
        if self.norm_weight_decay is not None:
            non_negative_number(self.norm_weight_decay, "trainer.norm_weight_decay")
        if self.clip_grad_norm is not None:
            positive_number(self.clip_grad_norm, "trainer.clip_grad_norm")
        integer(self.model_ema_steps, "trainer.model_ema_steps", minimum=1)
        if not 0 < self.model_ema_decay < 1:
            raise ConfigError(
                "trainer.model_ema_decay",
                self.model_ema_decay,
                "a number between 0 and 1, e.g. 0.999",
            )


def trainer_schema(name: str | None) -> type:
    """A trainer node's schema: trainer=classify names itself, trainer=default does not."""
    return ClassifyTrainerConfig if name == "classify" else TrainerConfig
