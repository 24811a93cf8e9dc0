"""SpikingJelly's model-zoo classifiers (spiking_resnet, spiking_vgg, sew_resnet) built by
their own factory functions.

The zoo's factories have no ModelConfig of their own, so `ZooModelConfig` names the factory
and `ZooModelBuilder` calls it: both SNN engines build through the same builder. The neuron
is SpikingJelly's serialisable `NeuronConfig`, so the config round-trips through
`TrainingConfig.as_dict()/from_dict()` and a checkpoint's `config.json`; the group spells it
as every SNN model does (`model.neuron._target_`, neuron_key.py). The factories hard-code a
3-channel stem: another `in_channels` (event frames: 2) swaps that convolution (input_conv.py).
There is no TP shard or PP split for them (SpikingJelly's builder has one for SEW-ResNet only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch.nn as nn
from spikingjelly.activation_based import functional
from spikingjelly.activation_based.distributed.vision import ModelConfig
from spikingjelly.activation_based.distributed.vision.config import NeuronConfig

from experiments.errors import ConfigError
from experiments.snn.models import neuron_key
from experiments.snn.models.input_conv import with_input_channels
from experiments.snn.models.whole_model import WholeModelBuilder

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


@dataclass(frozen=True)
class ZooModelConfig(ModelConfig):
    """A zoo factory and the arguments SpikingJelly's factories take, nothing else."""

    builder: ClassVar[str] = "experiments.snn.models.zoo.ZooModelBuilder"
    factory: str = ZOO_PACKAGE + "spiking_resnet.spiking_resnet18"
    # The factories are input-size agnostic (adaptive pooling); kept so planning can check it
    # against data.image_size and the VGG's five 2x2 max-pools.
    image_size: int = 224
    in_channels: int = 3  # the factories' stem takes 3; another count swaps it (input_conv.py)
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
        if self.image_size <= 0 or self.in_channels <= 0:
            raise ValueError("image_size and in_channels must be positive.")
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
        """The neuron key (neuron_key.py). A factory has no neuron of its own, so the node is
        required; the builder adds `detach_reset` (a field here) to the neuron itself."""
        if values.get("neuron") is None and "neuron_config" not in values:
            raise ConfigError(
                "model.neuron._target_",
                None,
                f"a SpikingJelly neuron class, e.g. {neuron_key.NEURON_EXAMPLES}",
            )
        return neuron_key.group_values(cls, values, builder_adds_detach_reset=True)


class ZooModelBuilder(WholeModelBuilder):
    """The whole model on every rank: FSDP2 shards it (blocks as roots), TP/PP do not."""

    def _name(self) -> str:
        return str(self.config.factory)

    def _fsdp_roots(self, model: nn.Module) -> tuple[str, ...]:
        return fsdp_roots(model)

    def _build_canonical_model(self) -> nn.Module:
        config = self.config
        if not isinstance(config, ZooModelConfig):
            raise TypeError("ZooModelBuilder requires ZooModelConfig.")
        spiking_neuron, kwargs = neuron_key.built_neuron(config.neuron_config, config.detach_reset)
        if config.connection is not None:
            kwargs["cnf"] = config.connection
        model = neuron_key.import_path(config.factory)(
            pretrained=False,
            spiking_neuron=spiking_neuron,
            num_classes=config.num_classes,
            **kwargs,
        )
        with_input_channels(model, config.in_channels)
        functional.set_step_mode(model, config.step_mode)
        return model


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
