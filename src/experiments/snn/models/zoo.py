"""SpikingJelly's model-zoo classifiers (spiking_resnet, spiking_vgg, sew_resnet) built by
their own factory functions.

The zoo's factories have no ModelConfig of their own, so `ZooModelConfig` names the factory
and `ZooModelBuilder` calls it: both SNN engines build through the same builder. The neuron
is SpikingJelly's serialisable `NeuronConfig`, so the config round-trips through
`TrainingConfig.as_dict()/from_dict()` and a checkpoint's `config.json`;
`ZooModelConfig.group_values` translates the Hydra spelling (`model.neuron._target_`).
There is no TP shard or PP split for them (SpikingJelly's builder has one for SEW-ResNet only).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.distributed as dist
import torch.nn as nn
from spikingjelly.activation_based import functional, neuron, surrogate
from spikingjelly.activation_based.distributed.vision import ModelBuilder, ModelConfig
from spikingjelly.activation_based.distributed.vision.config import NeuronConfig

from experiments.errors import ConfigError

ZOO_PACKAGE = "spikingjelly.activation_based.model."
# family -> (module, factories we offer, whether the factory takes `cnf`)
FAMILIES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "spiking_resnet": (
        ZOO_PACKAGE + "spiking_resnet",
        ("spiking_resnet18", "spiking_resnet34", "spiking_resnet50"),
        False,
    ),
    "spiking_vgg": (
        ZOO_PACKAGE + "spiking_vgg",
        ("spiking_vgg11_bn", "spiking_vgg16_bn"),
        False,
    ),
    "sew_resnet": (
        ZOO_PACKAGE + "sew_resnet",
        tuple(f"sew_resnet{depth}" for depth in (18, 34, 50, 101, 152)),
        True,
    ),
}
FACTORIES = {
    f"{module}.{name}": family for family, (module, names, _) in FAMILIES.items() for name in names
}
CONNECTIONS = ("ADD", "AND", "IAND")
# Set by the builder, not by the user: SpikingJelly's NeuronConfig refuses the first three.
RESERVED_NEURON_KEYS = ("step_mode", "surrogate_function", "backend", "detach_reset")
NEURON_EXAMPLES = (
    "spikingjelly.activation_based.neuron.LIFNode, "
    "spikingjelly.activation_based.neuron.IFNode, "
    "spikingjelly.activation_based.neuron.ParametricLIFNode"
)
SURROGATE_EXAMPLES = (
    "spikingjelly.activation_based.surrogate.ATan, spikingjelly.activation_based.surrogate.Sigmoid"
)


def _import(path: str) -> Any:
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ImportError(f"{path!r} is not a dotted path")
    return getattr(importlib.import_module(module_name), name)


def _class(path: Any, key: str, base: type, kind: str, examples: str) -> type:
    try:
        cls = _import(str(path))
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(
            key, path, f"cannot import it ({error}); a SpikingJelly {kind} class, e.g. {examples}"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(
            key,
            path,
            f"not a SpikingJelly {kind} class ({base.__module__}.{base.__qualname__} "
            f"subclass), e.g. {examples}",
        )
    return cls


def _check_kwargs(
    cls: type, kwargs: dict[str, Any], prefix: str, reserved: tuple[str, ...]
) -> None:
    """The class's own signature decides, so `model.neuron._target_=...IFNode` with LIF's
    `tau` still in the node is one clear line, not a TypeError in every rank."""
    parameters = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    names = [name for name in parameters if name != "self" and name not in reserved]
    for key, value in kwargs.items():
        if key in reserved:
            where = "model.detach_reset" if key == "detach_reset" else "the model builder"
            raise ConfigError(f"{prefix}{key}", value, f"set by {where}; remove it from {prefix}*")
        if key not in names and not takes_any:
            raise ConfigError(
                f"{prefix}{key}",
                value,
                f"{cls.__name__} takes no {key!r} (it takes "
                + ", ".join(names)
                + f"); remove it with ~{prefix}{key}",
            )


def _node(values: dict[str, Any], key: str) -> tuple[Any, dict[str, Any]]:
    node = values.pop(key, None)
    if node is None:
        return None, {}
    if not isinstance(node, dict) or "_target_" not in node:
        raise ConfigError(
            f"model.{key}", node, f"a node with a _target_ class path (model.{key}._target_=...)"
        )
    node = dict(node)
    return node.pop("_target_"), node


@dataclass(frozen=True)
class ZooModelConfig(ModelConfig):
    """A zoo factory and the arguments SpikingJelly's factories take, nothing else."""

    builder: ClassVar[str] = "experiments.snn.models.zoo.ZooModelBuilder"
    factory: str = ZOO_PACKAGE + "spiking_resnet.spiking_resnet18"
    # The factories are input-size agnostic (adaptive pooling); kept so planning can check it
    # against data.image_size and the VGG's five 2x2 max-pools.
    image_size: int = 224
    detach_reset: bool = True
    connection: str | None = None  # SEW-ResNet's `cnf`: ADD | AND | IAND
    neuron_config: NeuronConfig = field(
        default_factory=lambda: NeuronConfig(
            "spikingjelly.activation_based.neuron.LIFNode",
            {"tau": 2.0},
            "spikingjelly.activation_based.surrogate.ATan",
        )
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        family = FACTORIES.get(self.factory)
        if family is None:
            raise ValueError(f"factory must be one of {', '.join(sorted(FACTORIES))}.")
        if self.image_size <= 0:
            raise ValueError("image_size must be positive.")
        if FAMILIES[family][2]:
            if self.connection not in CONNECTIONS:
                raise ValueError(f"connection must be one of {', '.join(CONNECTIONS)}.")
        elif self.connection is not None:
            raise ValueError(f"connection applies to sew_resnet factories only, not {family}.")
        if not isinstance(self.neuron_config, NeuronConfig):
            raise TypeError("neuron_config must be a NeuronConfig.")

    @property
    def family(self) -> str:
        return FACTORIES[self.factory]

    @classmethod
    def group_values(cls, values: dict[str, Any]) -> dict[str, Any]:
        """`model.neuron` / `model.surrogate` nodes (Hydra `_target_` style) -> NeuronConfig.
        Both classes are imported and their arguments checked here, in planning."""
        values = dict(values)
        neuron_path, neuron_kwargs = _node(values, "neuron")
        surrogate_path, surrogate_kwargs = _node(values, "surrogate")
        if "neuron_config" in values:
            return values  # given directly (a recorded library config): the class checks it
        if neuron_path is None:
            raise ConfigError(
                "model.neuron._target_",
                None,
                f"a SpikingJelly neuron class, e.g. {NEURON_EXAMPLES}",
            )
        neuron_cls = _class(
            neuron_path, "model.neuron._target_", neuron.BaseNode, "neuron", NEURON_EXAMPLES
        )
        _check_kwargs(neuron_cls, neuron_kwargs, "model.neuron.", RESERVED_NEURON_KEYS)
        if surrogate_path is not None:
            surrogate_cls = _class(
                surrogate_path,
                "model.surrogate._target_",
                surrogate.SurrogateFunctionBase,
                "surrogate",
                SURROGATE_EXAMPLES,
            )
            _check_kwargs(surrogate_cls, surrogate_kwargs, "model.surrogate.", ())
        try:
            values["neuron_config"] = NeuronConfig(
                str(neuron_path), neuron_kwargs, surrogate_path, surrogate_kwargs
            )
        except (TypeError, ValueError) as error:
            raise ConfigError(
                "model.neuron", neuron_kwargs, f"SpikingJelly's NeuronConfig rejects it: {error}"
            ) from None
        return values


def _neuron(config: ZooModelConfig) -> tuple[type, dict[str, Any]]:
    """Imported by path (not SpikingJelly's registry lookup), so a user's own BaseNode
    subclass works in every rank without a registration step."""
    declared = config.neuron_config
    kwargs = dict(declared.kwargs)
    kwargs["detach_reset"] = config.detach_reset
    if declared.surrogate is not None:
        kwargs["surrogate_function"] = _import(declared.surrogate)(**declared.surrogate_kwargs)
    return _import(declared.class_path), kwargs


class ZooModelBuilder(ModelBuilder):
    """The whole model on every rank: FSDP2 shards it (blocks as roots), TP/PP do not."""

    def _build_canonical_model(self) -> nn.Module:
        config = self.config
        if not isinstance(config, ZooModelConfig):
            raise TypeError("ZooModelBuilder requires ZooModelConfig.")
        spiking_neuron, kwargs = _neuron(config)
        if config.connection is not None:
            kwargs["cnf"] = config.connection
        model = _import(config.factory)(
            pretrained=False,
            spiking_neuron=spiking_neuron,
            num_classes=config.num_classes,
            **kwargs,
        )
        functional.set_step_mode(model, config.step_mode)
        return model

    def _pipeline_stage(self, model: nn.Module, rank: int, size: int) -> nn.Module:
        if size != 1:
            raise ValueError(f"{self.config.factory} has no pipeline split.")
        return model

    def build(
        self,
        *,
        process_group: dist.ProcessGroup | None,
        memopt_process_group: dist.ProcessGroup | None,
        pipeline_rank: int,
        pipeline_size: int,
        pipeline_microbatches: int,
        device: torch.device,
        micro_batch_size: int,
        memopt_level: int,
        memopt_compress_inputs: bool,
        memopt_checkpoint_budget: str,
    ) -> tuple[nn.Module, tuple[str, ...], tuple[int, ...] | None, tuple[int, ...] | None]:
        if process_group is not None and dist.get_world_size(process_group) > 1:
            raise ValueError(f"{self.config.factory} has no tensor-parallel shard.")
        if memopt_level:
            raise ValueError(f"{self.config.factory} has no memopt split.")
        model = self._pipeline_stage(self._build_canonical_model(), pipeline_rank, pipeline_size)
        model.to(device)
        return model, fsdp_roots(model), None, None


def fsdp_roots(model: nn.Module) -> tuple[str, ...]:
    """Residual blocks for the ResNets (as SpikingJelly's SEW builder does), the feature and
    classifier stacks for the VGGs; inner to outer, as fully_shard wants them."""
    blocks = tuple(
        name
        for name, module in model.named_modules()
        if type(module).__name__ in {"BasicBlock", "Bottleneck"}
    )
    if blocks:
        return blocks
    return tuple(
        name
        for name, module in model.named_children()
        if any(True for _ in module.parameters()) and name in {"features", "classifier"}
    )
