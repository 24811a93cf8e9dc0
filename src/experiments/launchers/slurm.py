"""Slurm through submitit: one Slurm task per torch.distributed rank.

The sbatch script shown in a dry run is made by submitit's own `_make_sbatch_string`, from the
same parameters hydra-submitit-launcher will hand it (the same python, the same folder, an
array for a sweep of several points), so what is printed is what is queued.

Where users meet Slurm, in the login process (`prepare_submission`, called by the callback
before anything is written): no sbatch/srun on PATH is one line and exit 2; sbatch refusing the
job is one line with Slurm's reason and the `launcher.*` key to change; without Slurm
accounting, submitit's failing sacct polls are reported once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.resolvers import slurm_setup_lines
from experiments.role import Kind, Role

log = logging.getLogger(__name__)

# submitit submits with sbatch and refuses to start when srun is not on PATH.
CLIENT_TOOLS = ("sbatch", "srun")
# hydra-submitit-launcher's default (SlurmQueueConf.array_parallelism), which
# launcher.array_parallelism keeps: at most this many array tasks of a sweep run at once.
ARRAY_PARALLELISM = 256


# Slurm's default MaxArraySize (array indices 0..1000), when scontrol does not say.
MAX_ARRAY_SIZE = 1001


def max_array_size() -> int:
    """The cluster's MaxArraySize: an array's task indices must stay below it, so a larger
    sweep is submitted as several arrays (submitit issue 1624)."""
    import subprocess

    try:
        out = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return MAX_ARRAY_SIZE
    found = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.MULTILINE)
    return max(1, int(found.group(1))) if found else MAX_ARRAY_SIZE


def world_size(launcher: dict) -> int:
    return launcher["nodes"] * launcher["tasks_per_node"]


def has_cuda(launcher: dict) -> bool:
    return launcher.get("gpus_per_node", 0) > 0


def resources(launcher: dict, family: str) -> list[str]:
    """What each Slurm job asks for, in words (the dry run and the submission print it), and
    a warning when an SNN job asks for no GPU: Slurm grants none unless
    launcher.gpus_per_node is set, and SpikingJelly's loop then trains on the nodes' CPUs."""
    gpus, tasks = launcher.get("gpus_per_node") or 0, launcher["tasks_per_node"]
    per_task = f"{gpus // tasks} GPU per task" if gpus else "no GPU"
    lines = [
        f"Slurm job: {launcher['nodes']} node(s) x {tasks} task(s), {per_task} "
        f"(launcher.gpus_per_node={gpus}), {launcher['cpus_per_task']} CPU(s) per task, "
        f"{launcher['mem_gb']} GB a node, {launcher['timeout_min']} min"
    ]
    if not gpus and family == "snn":
        lines.append(
            "warning: launcher.gpus_per_node=0: the job asks Slurm for no GPU, so SpikingJelly's "
            "loop trains on CPUs; for GPUs set launcher.gpus_per_node=<GPUs a node> and "
            "launcher.tasks_per_node to the same"
        )
    return lines


def sbatch_parameters(launcher: dict, job_name: str) -> dict[str, object]:
    """The sbatch options submitit derives from our launcher fields (conf/launcher/slurm.yaml
    maps them onto hydra.launcher; submitit drops only the unset ones, so an empty `setup`
    still gives the script its `# setup` section)."""
    parameters: dict[str, object] = {
        "job_name": job_name,
        "nodes": launcher["nodes"],
        "ntasks_per_node": launcher["tasks_per_node"],
        "cpus_per_task": launcher["cpus_per_task"],
        "mem": f"{launcher['mem_gb']}GB",
        "time": launcher["timeout_min"],
        "signal_delay_s": launcher["signal_delay_s"],
        "setup": slurm_setup_lines(launcher.get("setup")),
        "additional_parameters": dict(launcher.get("additional_parameters") or {}),
        "array_parallelism": launcher.get("array_parallelism", ARRAY_PARALLELISM),
    }
    if launcher["gpus_per_node"]:
        parameters["gpus_per_node"] = launcher["gpus_per_node"]
    for key in ("partition", "account", "qos", "constraint"):
        if launcher.get(key):
            parameters[key] = launcher[key]
    return parameters


def command(launcher: dict, overrides: list[str], run_dir: str, points: int = 1) -> list[str]:
    """The sbatch script submitit will write, as lines. A sweep of several points is one job
    array (`points` tasks, as submitit's map_array submits it); one point is a plain job."""
    from submitit.slurm.slurm import _make_sbatch_string

    # The run directory is <sweep dir>/<point>; submitit's folder is <sweep dir>/.submitit/%j
    # and the job is named after the Hydra job ("train"), as conf/launcher/slurm.yaml sets them.
    # submitit runs the job with the login process's own interpreter (sys.executable).
    folder = str(Path(run_dir).absolute().parent / ".submitit" / "%j")
    parameters = sbatch_parameters(launcher, "train")
    if launcher.get("snapshot", True):  # (its folder is made at submission)
        from experiments.launchers import snapshot

        preview = snapshot.preview_lines(Path(folder).parent.parent)
        parameters["setup"] = [*preview, *parameters["setup"]]
    if points > 1:
        parameters["map_count"] = points
    script = _make_sbatch_string(
        command=" ".join(
            [shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(folder)]
        ),
        folder=folder,
        **parameters,
    )
    return script.splitlines()


# ---------------------------------------------------------------- the login process


def prepare_submission(launcher: dict) -> None:
    """Before hydra-submitit-launcher submits (and before Hydra writes the sweep directory):
    refuse a machine without Slurm's client, and make sacct's failures readable (see the
    module docstring; sbatch's refusals are made one line where slurm_jobs.submit submits)."""
    missing = [tool for tool in CLIENT_TOOLS if shutil.which(tool) is None]
    if missing:
        raise ConfigError(
            "launcher",
            "slurm",
            f"Slurm's {' and '.join(missing)} not found on PATH; run on a Slurm login node "
            "(or install Slurm's client, e.g. apt-get install slurm-client), or use "
            "launcher=local or launcher=torchrun",
        )
    _sacct_failure_once()


# Slurm's reasons for refusing a job (sbatch's stderr), most specific first, and the launcher
# keys that change what was asked for. A reason matching none is still shown, as Slurm said it.
REFUSALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"memory", ("mem_gb",)),
    (r"time limit", ("timeout_min",)),
    (r"account", ("account", "partition")),
    (r"partition", ("partition",)),
    (r"qos", ("qos",)),
    (r"feature|constraint", ("constraint",)),
    (r"gres|generic resource|gpu", ("gpus_per_node",)),
    (r"node count", ("nodes",)),
    (
        r"processors|cpu count|node configuration is not available",
        ("cpus_per_task", "tasks_per_node", "nodes"),
    ),
)


NOTHING_QUEUED = "nothing was queued"


def refusal(said: str, launcher: dict) -> tuple[str, bool]:
    """sbatch's stderr as one line: Slurm's reason, and the launcher keys (with their values)
    that change it. Also whether a key was found (a refused resource request is a config error,
    exit 2; an unknown reason, e.g. no controller, is not)."""
    reasons: list[str] = []
    for line in said.splitlines():
        reason = re.sub(r"^(sbatch: )?(error: )?(Batch job submission failed: )?", "", line.strip())
        if reason and reason not in reasons:
            reasons.append(reason)
    text = "; ".join(reasons) or "no reason given"
    for pattern, keys in REFUSALS:
        if re.search(pattern, text, re.IGNORECASE):
            shown = [f"launcher.{key}={launcher.get(key)}" for key in keys]
            change = ", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0]
            return f"error: Slurm refused the job ({text}): change {change}; {NOTHING_QUEUED}", True
    return f"error: Slurm refused the job: {text}; {NOTHING_QUEUED}", False


class SacctFailureOnce(logging.Filter):
    """On submitit's logger. submitit polls sacct for job states while the login process
    waits; without Slurm accounting every poll fails, and each failure was a "Bypassing sacct
    error" warning printed three times (submitit's stdout and stderr handlers, and Hydra's
    root handler). The first is reported once, through this module's logger; the rest are
    dropped (`failed` also tells the watcher to stop showing sacct's own stderr)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "Bypassing sacct error" not in record.getMessage():
            return True
        if not self.failed:
            self.failed = True
            log.warning(
                "%s (no Slurm accounting? submitit then sees a job end by its result file; "
                "this warning is not repeated)",
                record.getMessage(),
            )
        return False


def _sacct_failure_once() -> SacctFailureOnce:
    """Install SacctFailureOnce, and a sacct watcher that, once sacct has failed, discards
    sacct's stderr (without accounting it says "Slurm accounting storage is disabled" at each
    poll). Job states still come from sacct whenever it answers."""
    from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

    submitit_log = logging.getLogger("submitit")
    for installed in submitit_log.filters:
        if isinstance(installed, SacctFailureOnce):
            return installed
    once = SacctFailureOnce()
    submitit_log.addFilter(once)

    class QuietSacctWatcher(SlurmInfoWatcher):
        def _make_command(self) -> list[str] | None:
            command = super()._make_command()
            if command is None or not once.failed:
                return command
            return ["sh", "-c", 'exec "$0" "$@" 2>/dev/null', *command]

    SlurmJob.watcher = QuietSacctWatcher(delay_s=SlurmJob.watcher._delay_s)
    return once


def export_rank_env() -> None:
    """On a Slurm task: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from Slurm's variables,
    so every task of the job is one torch.distributed rank. CUDA_VISIBLE_DEVICES is left alone:
    SpikingJelly selects the GPU by LOCAL_RANK."""
    _threads_per_task()
    if "RANK" in os.environ:
        return
    from submitit.helpers import TorchDistributedEnvironment

    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def _threads_per_task() -> None:
    """One intra-op thread per CPU Slurm gave the task (launcher.cpus_per_task), as torchrun
    does for its workers (OMP_NUM_THREADS). Otherwise every task of a node starts a thread per
    core of the node: oversubscribed (measured here: 6 images/s instead of 50 for 2 tasks on 2
    cores), and numerically unlike the same run under torchrun (a spiking net turns the
    reduction-order differences into other spikes within a few steps)."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if "OMP_NUM_THREADS" in os.environ or not (cpus and cpus.isdigit()):
        return
    os.environ["OMP_NUM_THREADS"] = cpus
    import torch

    torch.set_num_threads(int(cpus))


def job_record(role: Role) -> dict[str, Any] | None:
    """Where this task's Slurm job is, for summary.json: ids, restarts, and its stdout/stderr
    files; None outside a Slurm job."""
    if role.kind is not Kind.SLURM_TASK:
        return None
    record: dict[str, Any] = {
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
        "ntasks": int(os.environ.get("SLURM_NTASKS", "1")),
        "nodelist": os.environ.get("SLURM_JOB_NODELIST"),
    }
    from experiments.launchers import snapshot

    code = snapshot.recorded()
    if code is not None:
        record["snapshot"] = code
    with contextlib.suppress(Exception):  # not in a submitit job, or an older submitit
        import submitit

        paths = submitit.JobEnvironment().paths
        record["stdout"], record["stderr"] = str(paths.stdout), str(paths.stderr)
    return record
