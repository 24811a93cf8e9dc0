"""SpikingJelly's zoo modules import torchvision for one name: map it to torch.hub's, in process.

`sew_resnet` (and `spiking_resnet`, `spiking_vgg`) import `load_state_dict_from_url` from
torchvision, which re-exports torch.hub's same function. Importing torchvision for it costs
1.3-1.7 s of CPU (its `ops.roi_align` imports `torch._dynamo`) in every process that builds
or plans a SEW-ResNet, for a function only `pretrained=True` calls. Only while such a module
executes and torchvision is not imported yet, this finder supplies the torch.hub function,
then restores `sys.modules`, so a later `import torchvision` gets the real package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

MODULES = frozenset(
    f"spikingjelly.activation_based.model.{name}"
    for name in ("sew_resnet", "spiking_resnet", "spiking_vgg")
)
# The modules try the old torchvision location first, then the one torchvision 0.13+ has.
OLD, CURRENT = "torchvision.models.utils", "torchvision._internally_replaced_utils"
_MISSING = object()


class _HubLoader(importlib.abc.Loader):
    """The module's own loader, run with torchvision's alias of torch.hub's function."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        import torch.hub

        alias = types.ModuleType(CURRENT)
        alias.load_state_dict_from_url = torch.hub.load_state_dict_from_url
        saved = {name: sys.modules.get(name, _MISSING) for name in (OLD, CURRENT)}
        sys.modules[OLD] = None  # type: ignore[assignment]  # ImportError: the module's fallback
        sys.modules[CURRENT] = alias
        try:
            self._loader.exec_module(module)
        finally:
            for name, value in saved.items():
                if value is _MISSING:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = value

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, ...: the real loader's
        return getattr(self._loader, name)


class HubImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES or "torchvision" in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _HubLoader(spec.loader)
        return spec


def install() -> None:
    if not any(isinstance(finder, HubImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, HubImportFinder())
