"""Model group: `conf/model/<name>.yaml` instantiates a SpikingJelly ModelConfig.

The config classes are SpikingJelly's (or our subclasses through its seam); this module
only knows what each architecture's builder supports, so validation can say it before launch.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from typing import Any

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from spikingjelly.activation_based.distributed.vision import ModelConfig
from torch.overrides import TorchFunctionMode

from experiments.errors import ConfigError
from experiments.snn.models import neuron_key
from experiments.topology import Capabilities

# Architectures are recognised by class path, so planning imports only the chosen model's
# module (SpikingJelly's sew_resnet imports torchvision, ~1.6 s; spikformer does not).
SJ_MODEL = "spikingjelly.activation_based.model."
SEW_RESNET34 = SJ_MODEL + "sew_resnet.SEWResNet34Config"
SPIKFORMER = SJ_MODEL + "spikformer.SpikformerConfig"
SPIKFORMER_CIFAR10 = SJ_MODEL + "spikformer.SpikformerCIFAR10Config"
SEW_RESNET = "experiments.snn.models.sew_resnet.SEWResNetConfig"
SPIKFORMER_DIMS = "experiments.snn.models.spikformer.SpikformerDimsConfig"
SEW_DVS = "experiments.snn.models.sew_dvs.SEWDVSConfig"
ZOO = "experiments.snn.models.zoo.ZooModelConfig"
BASIC_BLOCK_DEPTHS = (18, 34)  # what SpikingJelly's SEW builder shards (TP) and splits (PP)
# SpikingJelly's own config classes that take 3-channel input only, and the way round it.
THREE_CHANNELS = {
    SEW_RESNET34: "SpikingJelly's SEWResNet34Config requires in_channels=3; model=sew_resnet18 "
    "model.depth=34 is the same network through our SEWResNetConfig, for any channel count",
    SPIKFORMER_CIFAR10: "SpikingJelly's SpikformerCIFAR10Config builds a 3-channel stem; "
    "model=spikformer_4_384 is the official CIFAR model for any channel count",
}


def _is(config: ModelConfig, class_path: str) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" == class_path for c in type(config).__mro__)


def capabilities(config: ModelConfig) -> Capabilities:
    caps = _splits(config)
    reason = THREE_CHANNELS.get(f"{type(config).__module__}.{type(config).__qualname__}")
    if reason is not None:  # the class itself: our subclasses take any channel count
        return dataclasses.replace(caps, channels=3, channels_reason=reason)
    return caps


def _splits(config: ModelConfig) -> Capabilities:
    depth = getattr(config, "depth", 34)
    if _is(config, ZOO):
        return _zoo_capabilities(config)
    if _is(config, SEW_DVS):
        return _sew_dvs_capabilities(config)
    if _is(config, SPIKFORMER_DIMS):
        return _spikformer_capabilities(config)
    if _is(config, SEW_RESNET) and depth not in BASIC_BLOCK_DEPTHS:
        return Capabilities(
            (1,),
            1,
            "channels",
            note=f"SEW-ResNet{depth} is built from Bottleneck blocks, "
            "which SpikingJelly's builder neither shards (TP) nor splits into stages (PP)",
            square_only=True,
        )
    if _is(config, SEW_RESNET34):  # includes SEWResNetConfig 18/34
        return Capabilities(
            (1, 2, 4), 64, "the 64 channels of its first BasicBlock stage", square_only=True
        )
    if _is(config, SPIKFORMER_CIFAR10):
        return Capabilities((1, 2), 12, "its 12 attention heads", 4, fixed_image_size=32)
    if _is(config, SPIKFORMER):
        return Capabilities((1, 2, 4), 12, "its 12 attention heads", 16)
    return Capabilities(
        (1,), 1, "channels", note=f"{type(config).__name__} declares no TP/PP split"
    )


def _spikformer_capabilities(config: Any) -> Capabilities:
    """Head-wise TP also splits the stem's first width (embed_dims/8); stages: SpikingJelly's
    split for 4 or 6 blocks, equal runs of blocks otherwise (snn/models/spikformer.py)."""
    depth = config.depths
    stages = {4: (1, 2), 6: (1, 2, 4)}.get(depth) or tuple(
        size for size in (1, 2, 4) if depth % size == 0
    )
    heads = config.num_heads
    return Capabilities(
        stages, math.gcd(heads, config.embed_dims // 8), f"its {heads} attention heads"
    )


def _sew_dvs_capabilities(config: Any) -> Capabilities:
    stages = len(config.stage_channels)
    return Capabilities(
        (1,),
        1,
        "channels",
        min_image_side=config.smallest_side,
        image_reason=f"its {stages} 2x2 max-pools",
        memopt=False,
        note=f"SEW-ResNet's {stages}-stage DVS network is built whole (no channel-TP shard, "
        "no pipeline split); it runs on topology=single, ddp or fsdp2",
    )


def _zoo_capabilities(config: ModelConfig) -> Capabilities:
    factory = str(getattr(config, "factory", ""))
    vgg = ".spiking_vgg." in factory
    return Capabilities(
        (1,),
        1,
        "channels",
        **({"image_multiple": 32, "image_reason": "its five 2x2 max-pools"} if vgg else {}),
        memopt=False,
        note=f"SpikingJelly's zoo factory {factory.rsplit('.', 1)[-1]} builds the whole model, "
        "with no channel-TP shard or pipeline split; it runs on topology=single, ddp or fsdp2 "
        "(trainer=default, SpikingJelly's loop, or trainer=classify)"
        + ("; model=sew_resnet18|34 has TP and PP" if ".sew_resnet." in factory else ""),
    )


def instantiate_model_config(node: DictConfig) -> ModelConfig:
    """Build the SpikingJelly config dataclass; its own __post_init__ checks become ConfigErrors."""
    values: dict[str, Any] = OmegaConf.to_container(node, resolve=True)  # type: ignore[assignment]
    target = values.pop("_target_", None)
    values.pop("neuron_implementation", None)  # ours, not the dataclass's (snn/neurons.py)
    if not target:
        raise ConfigError("model._target_", target, "a ModelConfig class path")
    try:
        cls = get_class(target)
    except Exception as error:  # hydra wraps import failures in several exception types
        raise ConfigError("model._target_", target, f"cannot import it ({error})") from None
    if not (isinstance(cls, type) and issubclass(cls, ModelConfig)):
        raise ConfigError("model._target_", target, "must be a SpikingJelly ModelConfig subclass")
    names = {field.name for field in dataclasses.fields(cls)}
    # The neuron key (model.neuron, model.surrogate, model.detach_reset; neuron_key.py) ->
    # SpikingJelly's NeuronConfig, checked on the way; the zoo's class adds its own rule.
    translate = getattr(cls, "group_values", None)
    if translate is not None:
        values = translate(values)
    elif "neuron_config" in names:
        values = neuron_key.group_values(cls, values)
    for key, value in values.items():
        if key not in names:
            raise ConfigError(
                f"model.{key}",
                value,
                f"not a field of {cls.__name__}; valid: " + ", ".join(sorted(names)),
            )
        _check_field_type(cls, key, value)
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        # Name the field the library complains about when its message names one.
        named = [key for key in values if re.search(rf"\b{re.escape(key)}\b", str(error))]
        if named:
            key = named[0]
            raise ConfigError(
                f"model.{key}", values[key], f"{cls.__name__} rejects it: {error}"
            ) from None
        summary = ", ".join(f"{key}={value}" for key, value in values.items())
        raise ConfigError("model", summary, f"{cls.__name__} rejects it: {error}") from None


# Integer fields that count something: a value below 1 can never build a model.
_POSITIVE_FIELDS = {
    "time_steps",
    "num_classes",
    "image_size",
    "image_height",
    "image_width",
    "in_channels",
    "depth",
    "depths",
    "embed_dims",
    "num_heads",
}


def _check_field_type(cls: type, key: str, value: Any) -> None:
    """Name the field and the kind of value it takes, instead of the dataclass's repr and a
    comparison error from deep inside its __post_init__."""
    try:
        hint = typing.get_type_hints(cls).get(key)
    except Exception:  # an annotation that cannot be resolved: leave it to the class
        return
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        expected = "an integer >= 1" if key in _POSITIVE_FIELDS else "an integer"
        raise ConfigError(f"model.{key}", value, expected)
    if hint is int and key in _POSITIVE_FIELDS and value < 1:
        raise ConfigError(f"model.{key}", value, "an integer >= 1")
    if hint is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"model.{key}", value, "a number")
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"model.{key}", value, "true or false")


_PARAMETER_COUNTS: dict[str, int] = {}


class _NoRandomInitOnMeta(TorchFunctionMode):
    """Skips the random init of meta tensors, which holds no values to fill: on the meta
    device `normal_`/`uniform_` run torch's Python reference kernels, whose first call
    imports torch._dynamo (1.2-1.7 s of CPU in every process that plans a run). Shapes, and
    so the count, are the same."""

    RANDOM_INIT = frozenset({torch.Tensor.normal_, torch.Tensor.uniform_})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.RANDOM_INIT and args and getattr(args[0], "is_meta", False):
            return args[0]
        return func(*args, **(kwargs or {}))


def parameter_count(config: ModelConfig) -> int:
    """Count on the meta device: no memory, ~0.1-0.2 s even for SEW-ResNet152; once per
    config in a process (a sweep plans every point with the same model)."""
    key = f"{type(config).__module__}.{type(config).__qualname__}:{config!r}"
    if key not in _PARAMETER_COUNTS:
        builder = config.get_builder_cls()(config)
        with torch.device("meta"), _NoRandomInitOnMeta():
            model = builder._build_canonical_model()
        _PARAMETER_COUNTS[key] = sum(parameter.numel() for parameter in model.parameters())
    return _PARAMETER_COUNTS[key]


def build_single_process_model(
    config: ModelConfig, device: torch.device, micro_batch_size: int
) -> torch.nn.Module:
    """The whole model (one process, one stage) from a ModelConfig's builder: the classic
    Trainer and experiments-eval use the same model the default engine trains."""
    from spikingjelly.activation_based import functional

    model, _, _, _ = config.get_builder_cls()(config).build(
        process_group=None,
        memopt_process_group=None,
        pipeline_rank=0,
        pipeline_size=1,
        pipeline_microbatches=1,
        device=device,
        micro_batch_size=micro_batch_size,
        memopt_level=0,
        memopt_compress_inputs=False,
        memopt_checkpoint_budget="memory",
    )
    functional.set_step_mode(model, config.step_mode)
    return model
