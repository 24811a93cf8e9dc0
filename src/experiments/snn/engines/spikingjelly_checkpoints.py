"""SpikingJelly's `step_N/` checkpoints: which are complete, which are torn.

Read by the engine (resume), its step hook (keep_checkpoints) and experiments-eval, so it
lives apart from all three (the engine and its hook would otherwise import each other).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from experiments.run.record import NoSpaceError, free_bytes, no_space

STEP_FOLDER = re.compile(r"^step_(\d+)$")


def checkpoint_step(path: Path) -> int:
    match = STEP_FOLDER.match(path.name)
    return int(match.group(1)) if match else -1


def torn_reason(path: Path, shards: int) -> str | None:
    """Why a `step_N/` folder is not a complete SpikingJelly checkpoint (None: complete).

    The library writes config.json before `dcp.async_save` starts; DCP writes `.metadata`
    last, after every data file. Complete = config.json and `.metadata` in each of the
    `shards` (pp x tp) folders."""
    if not (path / "config.json").is_file():
        return "no config.json"
    folders = sorted(path.glob("pp_*_tp_*"))
    if len(folders) != shards:
        return f"{len(folders)} of {shards} pp_*_tp_* folders"
    missing = [f.name for f in folders if not (f / ".metadata").is_file()]
    return f"no .metadata in {', '.join(missing)}" if missing else None


def scan_checkpoints(root: Path, shards: int) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(complete checkpoints newest first, [(torn folder, why)])."""
    if not root.is_dir():
        return [], []
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) >= 0),
        key=checkpoint_step,
        reverse=True,
    )
    complete, torn = [], []
    for folder in folders:
        reason = torn_reason(folder, shards)
        if reason is None:
            complete.append(folder)
        else:
            torn.append((folder, reason))
    return complete, torn


def newest_spikingjelly_checkpoint(root: Path, shards: int = 1) -> Path | None:
    complete, _ = scan_checkpoints(root, shards)
    return complete[0] if complete else None


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def no_space_in_save(error: BaseException, path: Path, shards: int) -> NoSpaceError | None:
    """The NoSpaceError behind a failed save of `path` (a `step_N/` folder), or None when the
    failure is something else. torch's DCP writer may hide the errno (its zip writer reports
    only "unexpected pos"): then it is a full disk if the checkpoint cannot fit in what is free
    once its cut-short copy is gone. Rank 0 removes that copy (after every rank's writer
    finished: the library's `_finish_checkpoint` all-reduces first)."""
    import torch.distributed as dist

    path = Path(path)
    cause = no_space(error)
    written = _folder_bytes(path) if path.exists() else 0
    if dist.get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)
    complete, _ = scan_checkpoints(path.parent, shards)
    needed = max([written, *(_folder_bytes(folder) for folder in complete[:1])])
    free = free_bytes(path.parent)
    if cause is None and (free is None or needed <= free):
        return None
    return NoSpaceError(path, needed, cause, at_least=True)  # cause: ENOSPC or EDQUOT
