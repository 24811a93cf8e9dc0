"""Launcher group: who starts the ranks. `conf/launcher/<name>.yaml` -> `launchers/<name>.py`.

Each launcher module answers three questions for the plan: how many ranks it starts, whether
the ranks get CUDA, and the exact command it would run.
"""

from __future__ import annotations

from types import ModuleType

from experiments.errors import ConfigError
from experiments.launchers import local, slurm, torchrun

LAUNCHERS: dict[str, ModuleType] = {"local": local, "torchrun": torchrun, "slurm": slurm}


def launcher_module(name: str) -> ModuleType:
    if name not in LAUNCHERS:
        raise ConfigError("launcher.name", name, f"one of {', '.join(LAUNCHERS)}")
    return LAUNCHERS[name]
