"""SpikingJelly's `step_N/` checkpoints: which are complete, which are torn, what they hold.

Beside the library's files rank 0 writes `mesh.json`: the mesh and global batch that wrote
the checkpoint, which its recipe does not record (the data-parallel size) and a resume under
another topology needs. Read by the engine, its hooks and experiments-eval, so it lives
apart from all of them.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import re
import shutil
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

from experiments.run.record import NoSpaceError, free_bytes, no_space, write_json_atomic

STEP_FOLDER = re.compile(r"^step_(\d+)$")
MESH_FILE = "mesh.json"
BEST = "best"  # the best evaluation's checkpoint (early stopping): checkpoints/best/step_N/


def checkpoint_step(path: Path) -> int:
    match = STEP_FOLDER.match(Path(path).name)
    return int(match.group(1)) if match else -1


def shard_folder(pp_rank: int, tp_rank: int) -> str:
    return f"pp_{pp_rank:04d}_tp_{tp_rank:04d}"


def torn_reason(path: Path, shards: int | None = None) -> str | None:
    """Why a `step_N/` folder is not a complete checkpoint (None: complete). The library
    writes config.json before `dcp.async_save` starts, and DCP writes `.metadata` last."""
    if not (path / "config.json").is_file():
        return "no config.json"
    if shards is None:
        try:
            shards = written_shards(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            return f"config.json unreadable ({error})"
    folders = sorted(path.glob("pp_*_tp_*"))
    if len(folders) != shards:
        return f"{len(folders)} of {shards} pp_*_tp_* folders"
    missing = [f.name for f in folders if not (f / ".metadata").is_file()]
    return f"no .metadata in {', '.join(missing)}" if missing else None


def scan_checkpoints(root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(complete checkpoints newest first, [(torn folder, why)]), each judged by its own
    recipe's pp x tp."""
    if not root.is_dir():
        return [], []
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) >= 0),
        key=checkpoint_step,
        reverse=True,
    )
    judged = [(folder, torn_reason(folder)) for folder in folders]
    complete = [folder for folder, why in judged if why is None]
    return complete, [(folder, why) for folder, why in judged if why is not None]


def written_shards(path: Path) -> int:
    """How many (pp, tp) folders the recipe of the checkpoint at `path` asks for."""
    recipe = read_recipe(path)
    return int(recipe.get("pipeline_parallel_size", 1)) * int(recipe.get("tensor_parallel_size", 1))


def read_recipe(path: Path) -> dict[str, Any]:
    return json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))


def write_mesh(
    path: Path, mesh: dict[str, Any], global_batch: int, epoch_so_far: list[float] | None = None
) -> None:
    """mesh.json beside a checkpoint: the mesh and global batch it was written under, and
    (saved by the loop mid-epoch) the epoch's training loss so far, as the loop sums it:
    [sum of each sample's loss, samples], over the data-parallel ranks."""
    record: dict[str, Any] = {"mesh": mesh, "global_batch": global_batch}
    if epoch_so_far is not None:
        record["epoch_so_far"] = epoch_so_far
    write_json_atomic(Path(path) / MESH_FILE, record)


def read_mesh(path: Path) -> dict[str, Any] | None:
    """What `write_mesh` recorded, or None (a checkpoint written without it)."""
    try:
        return json.loads((Path(path) / MESH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class _TorchLoadingWeightsOnly(types.SimpleNamespace):
    """torch, whose `load` unpickles only tensors, numbers, strings and containers."""

    def load(self, f: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        kwargs["weights_only"] = True
        return torch.load(f, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        import torch

        return getattr(torch, name)


class _MetadataUnpickler(pickle.Unpickler):
    """A DCP `.metadata` file's unpickler that builds only what such a file holds: DCP's
    own metadata classes, torch sizes, dtypes and layouts, paths."""

    MODULES: ClassVar = (
        "torch.distributed.checkpoint.metadata",
        "torch.distributed.checkpoint.filesystem",
    )
    NAMES: ClassVar = {
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
    }

    def find_class(self, module: str, name: str) -> Any:
        import torch

        found = super().find_class(module, name) if module in (*self.MODULES, "torch") else None
        allowed = (
            (module, name) in self.NAMES
            or (module in self.MODULES and isinstance(found, type))
            or (module == "torch" and isinstance(found, torch.dtype))
        )
        if not allowed:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")
        return found if found is not None else super().find_class(module, name)


class _PickleForMetadata(types.SimpleNamespace):
    """pickle, whose `load` is the metadata unpickler's."""

    def load(self, file: Any) -> Any:
        return _MetadataUnpickler(file).load()

    def __getattr__(self, name: str) -> Any:
        return getattr(pickle, name)


@contextlib.contextmanager
def weights_only() -> Iterator[None]:
    """While a checkpoint loads, nothing in it can run code. torch's DCP reads a folder's
    `.metadata` with a plain `pickle.load`, and its planner a checkpoint's non-tensor values
    (optimizer hyper-parameters, the scheduler's state) with `torch.load(weights_only=False)`.
    Here the first builds only DCP's own metadata classes, and the second goes through
    `weights_only=True`: everything a state dict holds loads, nothing else is unpickled."""
    from torch.distributed.checkpoint import default_planner, filesystem

    with (
        mock.patch.object(default_planner, "torch", _TorchLoadingWeightsOnly()),
        mock.patch.object(filesystem, "pickle", _PickleForMetadata()),
    ):
        yield


def unwrapped(error: BaseException) -> BaseException:
    """DCP reports a read or write that failed as CheckpointException, a BaseException that
    holds each rank's own error: the first of those (a plain exception callers can catch and
    name); any other error as it is."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        cause = next(iter(failures.values()))
        return cause[0] if isinstance(cause, tuple) else cause
    return error


def read_shard(folder: Path) -> dict[str, Any]:
    """One (pp, tp) DCP folder as a plain nested state dict (model, optimizer, scheduler,
    scaler, rng, progress), read in this process without a process group."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    try:
        with weights_only():
            _load_state_dict(
                state,
                storage_reader=FileSystemReader(folder),
                planner=_EmptyStateDictLoadPlanner(),
                no_dist=True,
            )
    except BaseException as error:  # DCP's CheckpointException: its rank's own error
        cause = unwrapped(error)
        if cause is error:
            raise
        raise cause from None
    return state


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def remove_all_but_newest(root: Path, keep: int) -> None:
    """keep_checkpoints: complete checkpoints beyond the newest `keep` are removed (an
    in-flight one has no .metadata yet: it is neither counted nor touched)."""
    complete, _ = scan_checkpoints(root)
    for old in complete[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def remove_newer_than(root: Path, step: int) -> list[Path]:
    """The step folders under `root` (and its best/) past `step`: after a resume from `step`
    they belong to a trajectory the run no longer follows (a newer checkpoint that could not
    be loaded, or one past a checkpoint named with resume=), and the library would stop with
    FileExistsError on reaching one. Removed; returned for the log."""
    removed = []
    for folder in [*root.glob("step_*"), *(root / BEST).glob("step_*")]:
        if folder.is_dir() and checkpoint_step(folder) > step:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return sorted(removed)


def no_space_in_save(error: BaseException, path: Path) -> NoSpaceError | None:
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
    complete, _ = scan_checkpoints(path.parent)
    needed = max([written, *(_folder_bytes(folder) for folder in complete[:1])])
    free = free_bytes(path.parent)
    if cause is None and (free is None or needed <= free):
        return None
    return NoSpaceError(path, needed, cause, at_least=True)  # cause: ENOSPC or EDQUOT
