"""The environment a run's ranks will meet, checked before the queue and again on the node
(the checks, and where each runs: docs/launchers.md, Preflight).

"Fail before launch" covers the config (plan.py); the costly failures on a GPU cluster come
from the machine after hours in the queue. Each check answers where it can: the launching
process for local and torchrun runs; for Slurm, the login for what it can see and each task
again before it trains, with a token the login wrote into the run's directory, which a task
on another filesystem does not find. A failure is one line naming what is missing and how to
fix it; `experiments-doctor` prints them all as a table.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOKENS = ".preflight"  # in a Slurm sweep's directory: one token per point, written at the login
# A search's login plans its study under <sweep dir>/base (callbacks.py): its trials share it.
SEARCH_TOKEN = "base.json"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # what was found, or what is missing
    fix: str = ""  # the command (or the change) that fixes it

    def line(self) -> str:
        return f"preflight: {self.name}: {self.detail}" + (f"; fix: {self.fix}" if self.fix else "")


def login(plan: Any, values: dict[str, Any], gpus_here: bool = True) -> list[Check]:
    """What the launching process (or a Slurm login) can answer. `gpus_here`: false at a
    Slurm login, whose node is not the one the ranks get (the tasks count their GPUs)."""
    checks = [*_software(plan)]
    if gpus_here:
        checks += _gpus(plan, values["launcher"])
    checks += [*_data(values["data"], None), _space(plan, values)]
    return [check for check in checks if check is not None]


def task(plan: Any, values: dict[str, Any]) -> list[Check]:
    """A Slurm task before it trains: what its node has, against what its login saw."""
    token = token_path(plan.run_dir)
    if not token.is_file() and (token.parent / SEARCH_TOKEN).is_file():
        token = token.parent / SEARCH_TOKEN  # a search's trial: one token for its study
    seen = json.loads(token.read_text()) if token.is_file() else None
    checks = [
        Check(
            "run directory",
            seen is not None,
            f"{token} (written by the login) is not there: this node does not see the login's "
            f"{plan.run_dir.parent}"
            if seen is None
            else f"{plan.run_dir.parent} seen",
            "put hydra.sweep.dir on a filesystem every node mounts (not /tmp or a local disk)",
        ),
        *_software(plan),
        *_gpus(plan, values["launcher"]),
        *_data(values["data"], (seen or {}).get("data")),
        _space(plan, values),
    ]
    return [check for check in checks if check is not None]


def token_path(run_dir: Path) -> Path:
    return Path(run_dir).parent / TOKENS / f"{Path(run_dir).name}.json"


def write_token(plan: Any, values: dict[str, Any]) -> None:
    """The login's view, for its tasks: where it ran, and the data it counted."""
    path = token_path(plan.run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    counted = _count(values["data"])
    record = {"host": socket.gethostname(), "data": counted}
    path.write_text(json.dumps(record), encoding="utf-8")


def as_table(checks: list[Check]) -> str:
    """experiments-doctor's table: check, ok or what is missing, how to fix it."""
    width = max([len(c.name) for c in checks] + [5])
    lines = [f"{'check'.ljust(width)}  result"]
    for check in checks:
        lines.append(
            f"{check.name.ljust(width)}  {'ok' if check.ok else 'MISSING'}: {check.detail}"
        )
        if not check.ok and check.fix:
            lines.append(f"{''.ljust(width)}  fix: {check.fix}")
    return "\n".join(lines)


# --- the checks -----------------------------------------------------------------------------


def _software(plan: Any) -> list[Check]:
    checks: list[Check] = []
    neuron = getattr(plan, "neuron", None)
    if neuron:
        checks.append(
            Check(
                "neuron kernel",
                True,  # a pinned kernel that is not there was refused with the plan (neurons.py)
                f"{neuron.get('type')}: {neuron.get('implementation')} "
                f"(model.neuron_implementation={neuron.get('requested')})",
            )
        )
    if getattr(plan, "device", "cpu") == "cuda":
        import torch.distributed as dist

        checks.append(
            Check(
                "NCCL",
                dist.is_nccl_available(),
                "torch has NCCL" if dist.is_nccl_available() else "this torch has no NCCL",
                "install a CUDA build of torch (pip install torch --index-url "
                "https://download.pytorch.org/whl/cu124)",
            )
        )
    if getattr(plan, "recipe", None) is not None:  # a GAN: MMGen on mmcv-full's compiled ops
        found = importlib.util.find_spec("mmcv") is not None and (
            importlib.util.find_spec("mmcv._ext") is not None
        )
        checks.append(
            Check(
                "mmcv-full ops",
                found,
                "mmcv._ext compiled" if found else "mmcv is installed without its compiled ops",
                "make setup-gan (builds mmcv-full with its ops for this torch)",
            )
        )
    return checks


def _gpus(plan: Any, launcher: dict[str, Any]) -> list[Check]:
    if getattr(plan, "device", "cpu") != "cuda":
        return []
    import torch

    needed = int(launcher.get("nproc_per_node") or launcher.get("tasks_per_node") or 1)
    have = torch.cuda.device_count()
    return [
        Check(
            "GPUs",
            have >= needed,
            f"{have} visible for {needed} rank(s) a node",
            "ask for fewer ranks a node (launcher.nproc_per_node / launcher.tasks_per_node), "
            "or check CUDA_VISIBLE_DEVICES and launcher.gpus_per_node",
        )
    ]


def _count(data: dict[str, Any]) -> dict[str, Any] | None:
    """An image folder's classes and training images (None: no folder to count)."""
    from experiments.composition import ROOT_PLACEHOLDER

    root = data.get("root")
    if root is None or root == ROOT_PLACEHOLDER:
        return None
    from experiments.data import declared, split_sizes, training_images
    from experiments.data.image_folder import class_names

    if declared(data, "split_sizes") is not None:  # the builder counts its own files
        if not (Path(str(root)).is_dir() and os.access(root, os.R_OK | os.X_OK)):
            return {"root": str(root), "readable": False}
        sizes = split_sizes(data)
        return {
            "root": str(root),
            "readable": True,
            "classes": data.get("num_classes"),
            "images": None if sizes is None else sizes[0],
        }
    train = Path(str(root)) / str(data.get("train_subdirectory", "train"))
    if not (train.is_dir() and os.access(train, os.R_OK | os.X_OK)):
        return {"root": str(root), "readable": False}
    return {
        "root": str(root),
        "readable": True,
        "classes": len(class_names(train)),
        "images": training_images({**data, "val_fraction": None}),
    }


def _data(data: dict[str, Any], seen: dict[str, Any] | None) -> list[Check]:
    counted = _count(data)
    if counted is None:
        return []
    root = counted["root"]
    if not counted["readable"]:
        fix = f"mount {root} on this node, or set data.root to a path it can read"
        return [Check("data root", False, f"{root} cannot be read here", fix)]
    found = f"{root}: {counted['classes']} classes, {counted['images']} training images"
    if seen and (seen.get("classes"), seen.get("images")) != (
        counted["classes"],
        counted["images"],
    ):
        return [
            Check(
                "data root",
                False,
                f"{found} here, but the login counted {seen.get('classes')} classes and "
                f"{seen.get('images')} images",
                "sync the dataset to the nodes (the same files as the login sees)",
            )
        ]
    return [Check("data root", True, found)]


def checkpoint_bytes(plan: Any, values: dict[str, Any]) -> int:
    """One checkpoint, estimated: fp32 weights and the optimizer's state (AdamW: two moments;
    SGD with momentum: one), plus the GAN's EMA generator."""
    parameters = plan.parameters
    if isinstance(parameters, dict):  # a GAN: generator and discriminator (Adam each)
        return 4 * 3 * sum(parameters.values()) + 4 * parameters.get("generator", 0)
    optimizer = values.get("optimizer") or {}
    name = str(optimizer.get("name", ""))
    slots = 2 if "Adam" in name else (1 if optimizer.get("momentum") else 0)
    return 4 * (1 + slots) * int(parameters)


def _space(plan: Any, values: dict[str, Any]) -> Check | None:
    """Free space under the run directory covers the kept checkpoints and the one being
    written (trainer.keep_checkpoints + 1); a family whose plan counts no parameters is not
    estimated."""
    if not isinstance(getattr(plan, "parameters", None), int | dict):
        return None
    keep = int((values.get("trainer") or {}).get("keep_checkpoints") or 1)
    needed = checkpoint_bytes(plan, values) * (keep + 1)
    folder = Path(plan.run_dir)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    return Check(
        "free space",
        free >= needed,
        f"{_mb(free)} free under {folder}, {_mb(needed)} needed ({keep} kept + 1 being written, "
        f"{_mb(needed // (keep + 1))} each, estimated)",
        "free space there, set hydra.run.dir (or hydra.sweep.dir) on a larger filesystem, or "
        "lower trainer.keep_checkpoints",
    )


def _mb(count: int) -> str:
    return f"{count / 2**20:.0f} MB"
