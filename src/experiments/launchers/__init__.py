"""Launcher group: who starts the ranks. `conf/launcher/<name>.yaml` -> `launchers/<name>.py`.

Each launcher module answers three questions for the plan: how many ranks it starts, whether
the ranks get CUDA, and the exact command it would run. Launching itself is here too, behind
the functions below: child processes (children.py: torchrun's ranks, a local sweep's points,
warm_points.py) and Slurm (slurm.py, slurm_jobs.py); train.py and callbacks.py call only these.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from experiments.errors import ConfigError

# conf/launcher/<name>.yaml -> experiments.launchers.<name>, imported when a plan asks (the
# package itself stays light: `import experiments` registers resolvers.py's Slurm resolvers)
LAUNCHERS = ("local", "torchrun", "slurm")


def launcher_module(name: str) -> ModuleType:
    if name not in LAUNCHERS:
        raise ConfigError("launcher.name", name, f"one of {', '.join(LAUNCHERS)}")
    return importlib.import_module(f"experiments.launchers.{name}")


def launch_notes(launcher: dict, family: str) -> list[str]:
    """Lines the dry run and the submission add about what the launcher asks for (Slurm's
    resources; nothing for a local process or torchrun)."""
    module = launcher_module(launcher["name"])
    return module.resources(launcher, family) if hasattr(module, "resources") else []


def child_command(plan: Any) -> list[str] | None:
    """The command that runs `plan` in child processes (torchrun's ranks, a local sweep's
    point), or None when it runs in this process."""
    from experiments.launchers import children

    return children.child_command(plan)


def launch_children(plan: Any, command: list[str], warm_points: bool = False) -> float | None:
    """Start the children, wait, return the objective rank 0 among them recorded."""
    from experiments.launchers import children

    return children.launch(plan, command, warm_points)


def rank_logs(run_dir: Path, rank: int) -> list[str]:
    """Where a failed rank's traceback is (its log; under Slurm, its task's stderr too)."""
    from experiments.launchers import children

    return children.rank_logs(run_dir, rank)


def job_record() -> dict[str, Any] | None:
    """Slurm's record of this task (job id, array index, nodes, logs) for summary.json; None
    outside a Slurm job."""
    from experiments import distributed_env

    if not distributed_env.in_slurm_job():
        return None
    from experiments.launchers import slurm

    return slurm.job_record()


def before_sweep_submission(config: Any) -> None:
    """Before a sweep (or a Slurm submission) is planned: what must answer first (sbatch)."""
    from experiments.launchers import sweep

    sweep.before_submission(config)


def plan_sweep_launch(config: Any, plans: list[Any]) -> None:
    """The points' plans show the launch they will get (a Slurm sweep: one job array)."""
    from experiments.launchers import sweep

    sweep.plan_launch(config, plans)


def submits_without_waiting(config: Any) -> bool:
    from experiments.launchers import sweep

    return sweep.submits_without_waiting(config)


def refuse_search_without_waiting(config: Any) -> None:
    from experiments.launchers import sweep

    sweep.refuse_search_without_waiting(config)


def how_to_follow(sweep_dir: Path) -> str:
    from experiments.launchers import sweep

    return sweep.how_to_follow(sweep_dir)


def sweep_login_catches_ctrl_c(config: Any) -> None:
    from experiments.launchers import sweep

    sweep.login_catches_ctrl_c(config)


def launch_token(plan: Any) -> str | None:
    """What every node's launching process of one multi-node torchrun run shares (run/lock)."""
    from experiments.launchers import torchrun

    return torchrun.launch_token(plan)


def prepare_process() -> None:
    """What the launcher that started this process sets up in it before anything runs: a
    Slurm task's rank environment, a local sweep point's Ctrl-C handling."""
    from experiments import distributed_env

    if distributed_env.in_slurm_job():
        from experiments.launchers import slurm

        slurm.export_rank_env()
    from experiments.launchers import local

    if local.is_sweep_point():
        local.point_stops_on_ctrl_c()  # Ctrl-C at the sweep: checkpoint, `interrupted`


def ctrl_c_received() -> bool:
    """Ctrl-C reached a local sweep's login (the running point stops after a checkpoint)."""
    from experiments.launchers import local

    return local.ctrl_c_received()
