"""Launcher group: who starts the ranks. `conf/launcher/<name>.yaml` -> `launchers/<name>.py`.

Each launcher module answers three questions for the plan: how many ranks it starts, whether
the ranks get CUDA, and the exact command it would run. Launching is in the modules beside it:
child processes (children.py: torchrun's ranks, a local sweep's points, warm_points.py), a
sweep's submission (sweep.py) and Slurm (slurm.py, slurm_jobs.py). train.py and callbacks.py
import them where they launch, so `import experiments` stays light.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from experiments.role import Kind, Role
from experiments.validation import choice

# conf/launcher/<name>.yaml -> experiments.launchers.<name>, imported when a plan asks (the
# package itself stays light: `import experiments` registers experiments/resolvers.py's)
LAUNCHERS = ("local", "torchrun", "slurm")


def launcher_module(name: str) -> ModuleType:
    choice(name, "launcher.name", LAUNCHERS)
    return importlib.import_module(f"experiments.launchers.{name}")


def launch_notes(launcher: dict, family: str) -> list[str]:
    """Lines the dry run and the submission add about what the launcher asks for (Slurm's
    resources; nothing for a local process or torchrun)."""
    module = launcher_module(launcher["name"])
    return module.resources(launcher, family) if hasattr(module, "resources") else []


def prepare_process(role: Role) -> None:
    """What the launcher that started this process sets up in it before anything runs: a
    Slurm task's rank environment, a local sweep point's Ctrl-C handling."""
    if role.kind is Kind.SLURM_TASK:
        from experiments.launchers import slurm

        slurm.export_rank_env()
    if role.kind is Kind.SWEEP_POINT:
        from experiments.launchers import local

        local.point_stops_on_ctrl_c()  # Ctrl-C at the sweep: checkpoint, `interrupted`
