"""Slurm through submitit: one Slurm task per torch.distributed rank.

The sbatch script shown in a dry run is made by submitit's own `_make_sbatch_string`, from the
same parameters hydra-submitit-launcher will hand it, so what is printed is what is queued.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.validation import integer


def world_size(launcher: dict) -> int:
    return integer(launcher.get("nodes"), "launcher.nodes", minimum=1) * integer(
        launcher.get("tasks_per_node"), "launcher.tasks_per_node", minimum=1
    )


def has_cuda(launcher: dict) -> bool:
    return launcher.get("gpus_per_node", 0) > 0


def validate(launcher: dict) -> None:
    integer(launcher.get("cpus_per_task"), "launcher.cpus_per_task", minimum=1)
    integer(launcher.get("timeout_min"), "launcher.timeout_min", minimum=1)
    integer(launcher.get("mem_gb"), "launcher.mem_gb", minimum=1)
    integer(launcher.get("max_requeues"), "launcher.max_requeues", minimum=0)
    integer(launcher.get("signal_delay_s"), "launcher.signal_delay_s", minimum=0)
    gpus = integer(launcher.get("gpus_per_node"), "launcher.gpus_per_node", minimum=0)
    tasks = launcher["tasks_per_node"]
    if gpus and tasks != gpus:
        raise ConfigError(
            "launcher.tasks_per_node",
            tasks,
            f"a GPU run needs one task (rank) per GPU; with launcher.gpus_per_node="
            f"{gpus} use launcher.tasks_per_node={gpus}",
        )
    if not isinstance(launcher.get("additional_parameters") or {}, dict):
        raise ConfigError(
            "launcher.additional_parameters",
            launcher["additional_parameters"],
            "a mapping of sbatch options, e.g. {mail-type: END}",
        )


def sbatch_parameters(launcher: dict, job_name: str) -> dict[str, object]:
    """The sbatch options submitit derives from our launcher fields."""
    parameters: dict[str, object] = {
        "job_name": job_name,
        "nodes": launcher["nodes"],
        "ntasks_per_node": launcher["tasks_per_node"],
        "cpus_per_task": launcher["cpus_per_task"],
        "mem": f"{launcher['mem_gb']}GB",
        "time": launcher["timeout_min"],
        "signal_delay_s": launcher["signal_delay_s"],
    }
    if launcher["gpus_per_node"]:
        parameters["gpus_per_node"] = launcher["gpus_per_node"]
    for key in ("partition", "account", "qos", "constraint"):
        if launcher.get(key):
            parameters[key] = launcher[key]
    if launcher.get("setup"):
        parameters["setup"] = list(launcher["setup"])
    if launcher.get("additional_parameters"):
        parameters["additional_parameters"] = dict(launcher["additional_parameters"])
    return parameters


def command(launcher: dict, overrides: list[str], run_dir: str) -> list[str]:
    """The sbatch script, as lines."""
    from submitit.slurm.slurm import _make_sbatch_string

    # The run directory is <sweep dir>/<point>; submitit's folder is <sweep dir>/.submitit/%j
    # and the job is named after the Hydra job ("train"), as conf/launcher/slurm.yaml sets them.
    folder = str(Path(run_dir).parent / ".submitit" / "%j")
    script = _make_sbatch_string(
        command=f"python -u -m submitit.core._submit {folder}",
        folder=folder,
        **sbatch_parameters(launcher, "train"),
    )
    return script.splitlines()


def export_rank_env() -> None:
    """On a Slurm task: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from Slurm's variables,
    so every task of the job is one torch.distributed rank. CUDA_VISIBLE_DEVICES is left alone:
    SpikingJelly selects the GPU by LOCAL_RANK."""
    if "RANK" in os.environ:
        return
    from submitit.helpers import TorchDistributedEnvironment

    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def job_record() -> dict[str, Any]:
    """Where this task's Slurm job is: ids, restarts, and its stdout/stderr files."""
    record: dict[str, Any] = {
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
        "ntasks": int(os.environ.get("SLURM_NTASKS", "1")),
        "nodelist": os.environ.get("SLURM_JOB_NODELIST"),
    }
    try:
        import submitit

        paths = submitit.JobEnvironment().paths
        record["stdout"], record["stderr"] = str(paths.stdout), str(paths.stderr)
    except Exception:  # not in a submitit job, or an older submitit
        pass
    return record
