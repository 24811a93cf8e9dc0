"""How a composed GAN samples: one row per class (conditional recipes), EMA by default.

MMGen's `sample_from_noise` defaults to `sample_model='ema/orig'`, the EMA generator's images
followed by the raw one's (2 x num_batches) where the recipe trains an EMA, so every consumer of
ours asks for `'ema'`. MMGen's own sample hook can pass only config values (a list would be
ignored for random labels), so VisualizeClassRows builds the labels: row r is class r.
"""

from __future__ import annotations

from typing import Any

import torch

HOOK_TYPE = "VisualizeClassRows"


def num_classes(model: Any) -> int:
    """Classes a conditional MMGen model was built for; 0 for an unconditional one."""
    return int(getattr(model, "num_classes", 0) or 0)


def uses_ema(model: Any) -> bool:
    return bool(getattr(model, "use_ema", False)) and hasattr(model, "generator_ema")


def sample_kwargs(model: Any, ema: bool | None = None) -> dict[str, Any]:
    """sample_from_noise's `sample_model`: the EMA generator where the model has one (unless
    ema=False), so one call returns num_batches images, never MMGen's 'ema/orig' pair."""
    if not uses_ema(model):
        if ema:
            raise ValueError("this model trains no EMA generator (train_cfg.use_ema is off)")
        return {}
    return {"sample_model": "orig" if ema is False else "ema"}


def class_rows(classes: int, per_class: int) -> torch.Tensor:
    """[0]*per_class + [1]*per_class + ...: with nrow=per_class, row r shows class r."""
    return torch.arange(classes).repeat_interleave(per_class)


def grid_kwargs(model: Any, num_samples: int) -> tuple[dict[str, Any], int | None]:
    """(sampling kwargs, images per row) for a grid of num_samples images: a conditional
    model's grid has one row per class (None: the caller's square layout)."""
    kwargs = sample_kwargs(model)
    classes = num_classes(model)
    if not classes:
        return kwargs, None
    per_class = max(1, num_samples // classes)
    kwargs["label"] = class_rows(classes, per_class)
    return kwargs, per_class


def register() -> None:
    """Add VisualizeClassRows to mmcv's HOOKS (idempotent; imports mmgen)."""
    from experiments.gan import mmgen_compat

    mmgen_compat.install_ada_stub()
    from mmcv.runner import HOOKS
    from mmgen.core.hooks import VisualizeUnconditionalSamples

    if HOOK_TYPE in HOOKS.module_dict:
        return

    @HOOKS.register_module(name=HOOK_TYPE)
    class VisualizeClassRows(VisualizeUnconditionalSamples):
        """MMGen's sample hook (same fixed noise, files and layout code) with the labels of
        one row per class: num_samples // num_classes images per row, class r in row r."""

        def __init__(self, num_classes: int, num_samples: int = 16, **kwargs: Any) -> None:
            per_class = max(1, num_samples // num_classes)
            kwargs.pop("nrow", None)
            super().__init__(num_samples=per_class * num_classes, nrow=per_class, **kwargs)
            self.kwargs["label"] = class_rows(num_classes, per_class)


try:  # `custom_imports` of a dumped config imports this module: register for MMGen's tools
    register()
except ModuleNotFoundError as missing:  # an SNN-only install: nothing to register into
    if (missing.name or "").split(".")[0] not in ("mmgen", "mmcv"):
        raise
