"""A test-only zoo model that records what reaches it: the built model gets a forward pre-hook
that saves its first training input to `<record_file>` and appends every input's shape to
`<record_file>.shapes`. Training processes import it by its dotted path
(`model._target_=tests.layout_probe.RecordingZooConfig`, the repo on PYTHONPATH), so a test
sees the tensors the engine feeds the model without reaching into the process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn as nn

from experiments.snn.models.zoo import ZooModelBuilder, ZooModelConfig


@dataclass(frozen=True)
class RecordingZooConfig(ZooModelConfig):
    builder: ClassVar[str] = "tests.layout_probe.RecordingZooBuilder"
    record_file: str = ""


class RecordingZooBuilder(ZooModelBuilder):
    def build(self, **kwargs: Any) -> tuple[nn.Module, Any, Any, Any]:
        model, *rest = super().build(**kwargs)
        path = Path(self.config.record_file)

        def record(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            (x,) = args
            with open(f"{path}.shapes", "a", encoding="utf-8") as handle:
                handle.write(f"{'train' if module.training else 'eval'} {list(x.shape)}\n")
            if module.training and not path.exists():
                torch.save(x.detach().clone(), path)

        model.register_forward_pre_hook(record)
        return (model, *rest)
