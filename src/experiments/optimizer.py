"""The optimizer group (conf/optimizer/<name>.yaml): `name` is a torch.optim.Optimizer class
path, every other key one of its arguments. Checked against the class's own signature before
launch, so a typo or a missing argument is one line, not a TypeError inside a running job."""

from __future__ import annotations

from typing import Any

import torch

from experiments import data as data_group
from experiments import validation as check
from experiments.errors import ConfigError


def checked(optimizer: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kwargs = {key: value for key, value in optimizer.items() if key != "name"}
    cls = data_group.import_object(str(optimizer["name"]), "optimizer.name")
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ConfigError(
            "optimizer.name",
            optimizer["name"],
            "a torch.optim.Optimizer class path, e.g. torch.optim.AdamW",
        )
    check.arguments(cls, kwargs, "optimizer.", skip=1)
    check.positive_number(kwargs.get("lr"), "optimizer.lr")
    if "weight_decay" in kwargs:
        check.non_negative_number(kwargs["weight_decay"], "optimizer.weight_decay")
    return str(optimizer["name"]), kwargs


class AdamWNoDecayOn1D(torch.optim.AdamW):
    """AdamW whose weight decay spares 1-D parameters (biases, normalisation weights), as
    timm's optimizer factory builds it for the papers trained with timm's scripts (Spikformer:
    `create_optimizer_v2(..., filter_bias_and_bn=True)`, whose `param_groups_weight_decay`
    exempts every parameter of one dimension and every bias). SpikingJelly's loop builds the
    optimizer from `model.parameters()` alone, so the split is made here, by dimension (a
    bias is one-dimensional; sharded FSDP2/TP parameters keep their global shape)."""

    exempt = "1-D parameters"  # what the recipe card shows (snn/recipe_card.py)

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        params = list(params)
        decayed = [p for p in params if p.ndim > 1]
        spared = [p for p in params if p.ndim <= 1]
        groups = [
            group
            for group in (
                {"params": decayed, "weight_decay": weight_decay},
                {"params": spared, "weight_decay": 0.0},
            )
            if group["params"]
        ]
        super().__init__(groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
