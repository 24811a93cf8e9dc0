"""The neuron key of every SNN model option, spelled one way and checked in planning.

- `model.neuron`: `{_target_: <a spikingjelly.activation_based.neuron class>, <its arguments>}`;
  absent: the model's own neuron (SpikingJelly's SEW-ResNet and Spikformer builders make their
  paper's LIF; the zoo and the SEW DVS networks declare theirs in their config class).
- `model.surrogate`: `{_target_: <a spikingjelly.activation_based.surrogate class>, <its
  arguments>}`, or null: the neuron's own default surrogate.
- `model.detach_reset`: whether the reset is detached from the graph, for every neuron.

The option files `conf/model/neuron/{lif,if,plif}.yaml` and `conf/model/surrogate/
{atan,sigmoid}.yaml` swap a whole node (`model/neuron=if`), so no argument of the previous class
is left behind. Underneath it is SpikingJelly's serialisable `NeuronConfig` in the config
class's `neuron_config` field, so the config round-trips through `TrainingConfig.as_dict()` /
`from_dict()` and a checkpoint's `config.json`. Both classes are imported and their arguments
checked against their signatures here, so a wrong one is one line before launch, not a
TypeError in every rank.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any

from spikingjelly.activation_based import neuron, surrogate
from spikingjelly.activation_based.distributed.vision.config import NeuronConfig

from experiments.errors import ConfigError

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
# Fields of SpikingJelly's SEWResNet34Config that only its builder's own LIF reads.
OWN_NEURON_FIELDS = ("tau",)


def import_path(path: str) -> Any:
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ImportError(f"{path!r} is not a dotted path")
    return getattr(importlib.import_module(module_name), name)


def _class(path: Any, key: str, base: type, kind: str, examples: str) -> type:
    try:
        cls = import_path(str(path))
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


def group_values(
    cls: type, values: dict[str, Any], *, builder_adds_detach_reset: bool = False
) -> dict[str, Any]:
    """`model.neuron`, `model.surrogate` and `model.detach_reset` (the group's spelling) ->
    the fields of `cls`: its `neuron_config`, and `detach_reset` where it has that field.

    SpikingJelly's builders give a NeuronConfig's kwargs to every neuron, so `detach_reset`
    goes into them; the zoo's builder adds its own `detach_reset` field to the neuron itself
    (`builder_adds_detach_reset`), so its NeuronConfig stays as it was recorded."""
    values = dict(values)
    neuron_path, neuron_kwargs = _node(values, "neuron")
    surrogate_path, surrogate_kwargs = _node(values, "surrogate")
    if "neuron_config" in values:
        return values  # given directly (a recorded library config): the class checks it
    fields = {field.name: field for field in dataclasses.fields(cls)}
    detach_reset = values.get("detach_reset", True)
    if not isinstance(detach_reset, bool):
        raise ConfigError("model.detach_reset", detach_reset, "true or false")
    if "detach_reset" not in fields:
        values.pop("detach_reset", None)
    if neuron_path is None:
        _own_neuron(cls.__name__, surrogate_path, detach_reset, "detach_reset" in fields)
        return values
    for name in OWN_NEURON_FIELDS:
        if name in fields and name in values and values[name] != fields[name].default:
            raise ConfigError(
                f"model.{name}",
                values[name],
                f"{fields[name].default} (it is read only by the builder's own LIF, without "
                f"model.neuron); with a model.neuron, set model.neuron.{name}",
            )
    neuron_cls = _class(
        neuron_path, "model.neuron._target_", neuron.BaseNode, "neuron", NEURON_EXAMPLES
    )
    _resolvable_by_spikingjelly(cls, neuron_path, "model.neuron._target_", neuron)
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
        _resolvable_by_spikingjelly(cls, surrogate_path, "model.surrogate._target_", surrogate)
    kwargs = dict(neuron_kwargs)
    if not builder_adds_detach_reset:
        kwargs["detach_reset"] = detach_reset
    try:
        values["neuron_config"] = NeuronConfig(
            str(neuron_path), kwargs, surrogate_path, surrogate_kwargs
        )
    except (TypeError, ValueError) as error:
        raise ConfigError(
            "model.neuron", neuron_kwargs, f"SpikingJelly's NeuronConfig rejects it: {error}"
        ) from None
    return values


def _resolvable_by_spikingjelly(cls: type, path: Any, key: str, package: Any) -> None:
    """SpikingJelly's own config classes build through its builders, which look a neuron or
    surrogate up in its package (or in a registry each rank must fill first); ours import
    the class by its path."""
    if cls.__module__.startswith("spikingjelly.") and not str(path).startswith(
        package.__name__ + "."
    ):
        raise ConfigError(
            key,
            path,
            f"a class of {package.__name__}: {cls.__name__} is SpikingJelly's own config, "
            "whose builder resolves only SpikingJelly's classes",
        )


def _own_neuron(name: str, surrogate_path: Any, detach_reset: bool, has_field: bool) -> None:
    """Without model.neuron the builder makes its own neuron, with its own surrogate, and
    (SpikingJelly's Spikformer builder) always detaches the reset."""
    if surrogate_path is not None:
        raise ConfigError(
            "model.surrogate._target_",
            surrogate_path,
            f"null: without a model.neuron, {name}'s builder makes its own neuron with its "
            "own surrogate; choose a neuron too, e.g. model/neuron=lif",
        )
    if not detach_reset and not has_field:
        raise ConfigError(
            "model.detach_reset",
            detach_reset,
            f"true: without a model.neuron, {name}'s builder makes its own LIF, which "
            "detaches the reset; choose a neuron to change it, e.g. model/neuron=lif",
        )


def built_neuron(config: NeuronConfig, detach_reset: bool | None = None) -> tuple[type, dict]:
    """(class, kwargs) of a NeuronConfig, imported by path (not SpikingJelly's registry
    lookup), so a user's own BaseNode subclass works in every rank without a registration
    step; the surrogate is built here, one object the builder deep-copies for each neuron."""
    kwargs = dict(config.kwargs)
    if detach_reset is not None:
        kwargs["detach_reset"] = detach_reset
    if config.surrogate is not None:
        kwargs["surrogate_function"] = import_path(config.surrogate)(**config.surrogate_kwargs)
    return import_path(config.class_path), kwargs
