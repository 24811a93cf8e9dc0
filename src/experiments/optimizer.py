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
