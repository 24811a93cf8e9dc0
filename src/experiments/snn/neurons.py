"""`model.neuron_implementation`: which of SpikingJelly's neuron kernels a CUDA run binds.

SpikingJelly 2.0 picks one per neuron type and device (`cuda`, then `triton`, then `torch`),
pinned by its `SJ_<NEURON>_CUDA_IMPLEMENTATION` variable. Kernel installs are the most frequent
complaint in its issues, so the choice is a config key checked where the plan is made and
refused in one line; train.py sets the variable before any kernel is imported, and every rank
inherits it.
"""

from __future__ import annotations

import os
from typing import Any

from experiments.errors import ConfigError

CHOICES = ("auto", "cuda", "triton", "torch")  # SpikingJelly's own names
# SpikingJelly's registered neuron types (functional.neuron_implementation), by node class
TYPES = {
    "IFNode": "if",
    "LIFNode": "lif",
    "ParametricLIFNode": "plif",
    "QIFNode": "qif",
    "EIFNode": "eif",
    "IzhikevichNode": "izhikevich",
}


def neuron_type(model_config: Any) -> str | None:
    """The model's neuron type: its NeuronConfig's class, or the builders' default LIF (the
    distributed-vision SEW-ResNet and Spikformer builders); None for a node class SpikingJelly
    has no kernel for (it runs as plain torch)."""
    config = getattr(model_config, "neuron_config", None)
    if config is None:
        return "lif"
    return TYPES.get(str(config.class_path).rsplit(".", 1)[-1])


def variable(kind: str) -> str:
    return f"SJ_{kind.upper()}_CUDA_IMPLEMENTATION"


def environment(choice: str, kind: str | None) -> dict[str, str]:
    """What the run's processes get: SpikingJelly's variable, when an implementation is
    pinned (auto leaves SpikingJelly to choose)."""
    return {variable(kind): choice} if kind and choice != "auto" else {}


def checked(choice: Any, model_config: Any, device: str, execution: str) -> dict[str, Any]:
    """The neuron entry of the plan (dry run, summary.json), or a ConfigError."""
    if choice not in CHOICES:
        raise ConfigError("model.neuron_implementation", choice, "one of " + ", ".join(CHOICES))
    kind = neuron_type(model_config)
    entry: dict[str, Any] = {"type": kind, "requested": choice}
    if device != "cuda":
        if choice in ("cuda", "triton"):
            raise ConfigError(
                "model.neuron_implementation",
                choice,
                "auto or torch: this run has no CUDA (it trains on CPU ranks, where "
                f"SpikingJelly runs its torch reference); its {choice} kernels need an NVIDIA GPU",
            )
        return {**entry, "implementation": "torch-reference"}
    if kind is None:
        return {**entry, "implementation": "torch (no SpikingJelly kernel for this neuron)"}
    return {**entry, **_bound_on_cuda(choice, kind, execution)}


def _bound_on_cuda(choice: str, kind: str, execution: str) -> dict[str, Any]:
    """SpikingJelly's answer on this machine's GPU; on a login node without one, the tasks
    ask it again before they train (preflight.py)."""
    import torch

    if not torch.cuda.is_available():
        return {"implementation": "chosen on the GPU node (no GPU where the plan was made)"}
    from spikingjelly.activation_based.functional.neuron import neuron_implementation

    os.environ.update(environment(choice, kind))  # before SpikingJelly's selection reads it
    try:
        found = neuron_implementation(kind, torch.device("cuda"), execution=execution)
    except (RuntimeError, ValueError) as error:
        raise ConfigError(
            "model.neuron_implementation", choice, f"auto (SpikingJelly: {error})"
        ) from None
    bound = str(found["implementation"])
    if choice != "auto" and not bound.startswith(choice):
        why = found.get("unavailable", {}).get(choice, "not bound")
        raise ConfigError(
            "model.neuron_implementation",
            choice,
            f"auto or {bound}: SpikingJelly cannot bind {choice} for {kind} here ({why})",
        )
    return {"implementation": bound, "unavailable": dict(found.get("unavailable", {}))}
