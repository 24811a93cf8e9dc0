"""model.ddp: how GAN ranks keep their replicas in step, MMGen's two ways (`mode`; its tutorial
"DDP Training in MMGeneration" tabulates both).

Dynamic DDP synchronises whatever each backward reached (any architecture); static DDP
(cheaper), one DDP per part built with find_unused_parameters=False, synchronises a fixed set
of parameters, so a progressive-growing or multi-scale recipe, which trains other layers at
each stage, is refused (`check`). MMGen's wrapper moves each part to CUDA;
`CPUDistributedDataParallelWrapper` is the same wrapper for gloo ranks on the CPU (a subclass:
nothing in mmgen is edited).
"""

from __future__ import annotations

import functools
from typing import Any

from experiments.errors import ConfigError

MODES = ("dynamic", "static")

# MMGen model classes whose trained layers change during training, and why; a subclass (e.g.
# StyleGANV1 of ProgressiveGrowingGAN, PESinGAN of SinGAN) is as dynamic as its base.
DYNAMIC_ARCHITECTURES = {
    "ProgressiveGrowingGAN": "grows its generator and discriminator stage by stage, so each "
    "stage trains layers the previous one did not use",
    "SinGAN": "trains one scale's generator and discriminator at a time, so each stage trains "
    "other layers",
}


def mode(value: Any) -> str:
    if value not in MODES:
        raise ConfigError(
            "model.ddp",
            value,
            "dynamic (MMDistributedDataParallel with MMGen's dynamic-DDP runner) or static "
            "(MMGen's DDP wrapper: one DDP per generator and discriminator)",
        )
    return str(value)


def recipe_mode(cfg: Any) -> str:
    """What the recipe file itself asks for: MMGen's static recipes set use_ddp_wrapper=True
    and a runner without dynamic DDP (e.g. LSGAN, GGAN, BigGAN); the rest inherit the
    dynamic runner of MMGen's default_runtime."""
    runner = cfg.get("runner") or {}
    static = cfg.get("use_ddp_wrapper", False) and not runner.get("is_dynamic_ddp", False)
    return "static" if static else "dynamic"


def dynamic_reason(model_type: str) -> str | None:
    """Why MMGen's model class `model_type` cannot train under the static wrapper (None: it
    can)."""
    from mmgen.models import MODELS

    found = MODELS.get(model_type)
    for klass in getattr(found, "__mro__", ()):
        if klass.__name__ in DYNAMIC_ARCHITECTURES:
            return f"{model_type} {DYNAMIC_ARCHITECTURES[klass.__name__]}"
    return None


def check(ddp: str, cfg: Any, recipe: str) -> None:
    """Refuse the static wrapper for a dynamic architecture, before anything is launched."""
    if ddp != "static":
        return
    reason = dynamic_reason(str(cfg.model.get("type")))
    if reason:
        raise ConfigError(
            "model.ddp",
            ddp,
            f"dynamic for {recipe}: its model {reason}, and static DDP synchronises a fixed "
            "set of parameters chosen when the wrappers are built (MMGen: DDP wrapper with "
            "find_unused_parameters=False fails on dynamic GANs)",
        )


def configure(cfg: Any, ddp: str | None, recipe: str) -> str:
    """model.ddp (None: the recipe file's own way) checked and written into MMGen's keys."""
    chosen = ddp or recipe_mode(cfg)
    check(chosen, cfg, recipe)
    apply(cfg, chosen)
    return chosen


def configured(cfg: Any) -> str:
    """The way a composed recipe trains its ranks (what `apply` wrote, or cfg_options)."""
    return "static" if cfg.get("use_ddp_wrapper", False) else "dynamic"


def apply(cfg: Any, ddp: str) -> None:
    """The recipe keys MMGen reads for each way (its tutorial's settings)."""
    static = ddp == "static"
    cfg.use_ddp_wrapper = static
    cfg.find_unused_parameters = not static
    runner = cfg.get("runner")
    if runner:
        runner.is_dynamic_ddp = not static


REPLICATED_TENSOR_FLAG = "_use_replicated_tensor_module"


def install_replicated_tensor_fix() -> None:
    """mmcv 1.7.2's `MMDistributedDataParallel._run_ddp_forward` reads
    `self._use_replicated_tensor_module`, which torch 2.14's DDP no longer sets: every forward
    raises AttributeError. Set on the class (False, torch's old value), so every instance has it
    whoever builds it, on any device; a torch that sets it again keeps its per-instance value."""
    from mmcv.parallel import MMDistributedDataParallel

    if not hasattr(MMDistributedDataParallel, REPLICATED_TENSOR_FLAG):
        setattr(MMDistributedDataParallel, REPLICATED_TENSOR_FLAG, False)


def cpu_wrapper(model: Any) -> Any:
    """MMGen's DistributedDataParallelWrapper on CPU ranks (see the module docstring)."""
    return _wrapper_class()(model, broadcast_buffers=False, find_unused_parameters=False)


@functools.cache
def _wrapper_class() -> type:
    import torch.nn as nn
    from mmcv.parallel import MMDistributedDataParallel
    from mmcv.parallel.scatter_gather import scatter_kwargs
    from mmgen.core.ddp_wrapper import DistributedDataParallelWrapper

    class CPUDistributedDataParallelWrapper(DistributedDataParallelWrapper):
        """Each part with parameters under its own MMDistributedDataParallel, on the CPU;
        inputs scattered the way mmcv does for the CPU (device -1: DataContainers unwrapped,
        tensors stay where they are). It is still a DistributedDataParallelWrapper, so mmcv's
        is_module_wrapper, checkpoint saving and loading treat it as MMGen's."""

        def __init__(self, module: Any, dim: int = 0, **kwargs: Any) -> None:
            nn.Module.__init__(self)
            self.module = module
            self.dim = dim
            self.output_device = None
            for name, part in module._modules.items():
                if any(p.requires_grad for p in part.parameters()):
                    # (its forward needs install_replicated_tensor_fix, as on CUDA)
                    module._modules[name] = MMDistributedDataParallel(part, dim=dim, **kwargs)

        def scatter(self, inputs: Any, kwargs: Any, device_ids: Any = None) -> Any:
            return scatter_kwargs(inputs, kwargs, [-1], dim=self.dim)

        def forward(self, *inputs: Any, **kwargs: Any) -> Any:
            inputs, kwargs = self.scatter(inputs, kwargs)
            return self.module(*inputs[0], **kwargs[0])

        def train_step(self, *inputs: Any, **kwargs: Any) -> Any:
            inputs, kwargs = self.scatter(inputs, kwargs)
            return self.module.train_step(*inputs[0], **kwargs[0])

        def val_step(self, *inputs: Any, **kwargs: Any) -> Any:
            inputs, kwargs = self.scatter(inputs, kwargs)
            return self.module.val_step(*inputs[0], **kwargs[0])

    return CPUDistributedDataParallelWrapper


def unwrap(model: Any) -> None:
    """Give the model its own generator and discriminator back after training (the wrapper
    replaced them by their DDPs in place): rank 0 alone then samples and evaluates them."""
    from torch.nn.parallel import DistributedDataParallel

    for name, part in list(model._modules.items()):
        if isinstance(part, DistributedDataParallel):
            model._modules[name] = part.module
