"""torchrun spawns the ranks; each worker re-enters `python -m experiments.train` as one rank
of the same run directory (see train.py), so Hydra never makes a directory per rank."""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from experiments.launchers.command import run_dir_overrides

# For torchrun itself: a rendezvous store per restart round instead of one shared by all rounds
# (see distributed_env.init_process_group for why).
ENVIRONMENT = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def world_size(launcher: dict) -> int:
    return launcher["nproc_per_node"] * launcher["nnodes"]


def has_cuda(launcher: dict) -> bool:
    return torch.cuda.is_available()


def command(launcher: dict, overrides: list[str], run_dir: str) -> list[str]:
    rdzv_id = launcher.get("rdzv_id") or hashlib.sha1(run_dir.encode()).hexdigest()[:12]
    cmd = [
        "torchrun",
        f"--nnodes={launcher['nnodes']}",
        f"--nproc-per-node={launcher['nproc_per_node']}",
        f"--max-restarts={launcher['max_restarts']}",
        f"--monitor-interval={launcher['monitor_interval']}",
    ]
    if launcher.get("rdzv_endpoint"):
        cmd += [
            f"--node-rank={launcher['node_rank']}",
            f"--rdzv-backend={launcher['rdzv_backend']}",
            f"--rdzv-endpoint={launcher['rdzv_endpoint']}",
            f"--rdzv-id={rdzv_id}",
        ]
    else:
        cmd.append("--standalone")
    return [*cmd, "-m", "experiments.train", *overrides, *run_dir_overrides(run_dir)]


def launch_token(plan: Any) -> str | None:
    """Multi-node torchrun: the rendezvous (endpoint and id), the same on every node."""
    rendezvous = [
        a for a in plan.launch_command if a.startswith(("--rdzv-endpoint=", "--rdzv-id="))
    ]
    return "torchrun:" + ":".join(rendezvous) if len(rendezvous) == 2 else None
