"""Checkpoints of the CPU engine: `<run>/checkpoints/step_00000050/`.

Layout follows SpikingJelly's trainer (one step folder, one shard per (pp, tp) rank, the
recipe beside it). A checkpoint is written under a hidden `.step_N.partial` name and renamed
only after every shard and `meta.json` are on disk, so "latest" is never torn. Shards are
loaded with `weights_only=True`: we never unpickle arbitrary objects.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from experiments.run.record import write_json_atomic, write_torch_atomic

log = logging.getLogger(__name__)
META = "meta.json"
PREFIX = "step_"


class CheckpointError(RuntimeError):
    """No checkpoint can be resumed from, and starting over would silently lose work."""


def shard_name(pp_rank: int, tp_rank: int) -> str:
    return f"pp_{pp_rank:04d}_tp_{tp_rank:04d}.pt"


def step_dir(root: Path, step: int) -> Path:
    return root / f"{PREFIX}{step:08d}"


def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints, newest first. Partial ones (hidden names) are never listed."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / META).is_file()]
    return sorted(found, key=lambda p: p.name, reverse=True)


def save(
    root: Path,
    step: int,
    state: dict[str, Any],
    meta: dict[str, Any],
    *,
    shard: str,
    is_writer: bool,
    is_leader: bool,
    barrier: Callable[[], None],
    keep: int,
) -> Path:
    """Every rank calls this. Writers store their shard; the leader seals and prunes."""
    final = step_dir(root, step)
    partial = root / f".{final.name}.partial"
    if is_leader:
        shutil.rmtree(partial, ignore_errors=True)  # left by a crash during an earlier save
        partial.mkdir(parents=True)
    barrier()
    if is_writer:  # a full disk: NoSpaceError names the bytes, the temporary is removed
        write_torch_atomic(state, partial / shard)
    barrier()
    if is_leader:
        write_json_atomic(partial / META, {**meta, "step": step})
        if final.exists():  # a re-run of the same step after a resume
            shutil.rmtree(final)
        os.replace(partial, final)
        for old in complete_checkpoints(root)[keep:]:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def load(
    path: Path, shard: str, recipe: dict[str, Any], layout: tuple[str, ...] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load one shard of one checkpoint; raises on anything that is not a good checkpoint.
    `layout`: recipe fields the checkpoint may differ in (a data-parallel reshard, whose
    global batch the caller checks: snn/reshard.py)."""
    meta = read_meta(path)
    check_recipe(path, meta, recipe, layout)
    state = torch.load(path / shard, map_location="cpu", weights_only=True)
    return state, meta


def read_meta(path: Path) -> dict[str, Any]:
    return json.loads((path / META).read_text(encoding="utf-8"))


def check_recipe(
    path: Path, meta: dict[str, Any], recipe: dict[str, Any], layout: tuple[str, ...] = ()
) -> None:
    differing = sorted(
        key
        for key in set(recipe) | set(meta.get("recipe", {}))
        if key not in layout and recipe.get(key) != meta.get("recipe", {}).get(key)
    )
    if differing:
        raise CheckpointError(
            f"checkpoint {path} was written by a different config (differs in: "
            f"{', '.join(differing)}); resume=null starts over, or use another hydra.run.dir"
        )


def load_agreed(
    candidates: list[Path],
    shard: str,
    recipe: dict[str, Any],
    all_ranks_ok: Callable[[bool], bool],
    loader: Callable[[Path], tuple[dict[str, Any], dict[str, Any]]] | None = None,
) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
    """The newest candidate that loads on every rank. A checkpoint that fails to load on any
    rank (truncated, corrupt) is reported with its path and the previous one is tried, so all
    ranks resume from the same step. If candidates exist but none loads, that is an error:
    silently starting from scratch would lose the run's work."""
    failures = []
    for path in candidates:
        try:
            state, meta = (loader or (lambda p: load(p, shard, recipe)))(path)
            error = None
        except CheckpointError:
            raise  # a different config: the same answer on every rank
        except Exception as exception:  # truncated or corrupt files raise many types
            state = meta = None
            error = f"{path}: {type(exception).__name__}: {exception}"
        if all_ranks_ok(error is None):
            assert state is not None and meta is not None
            return path, state, meta
        reason = error or "a shard on another rank cannot be loaded"
        log.warning("checkpoint %s cannot be loaded (%s); trying the previous one", path, reason)
        failures.append(reason)
    if failures:
        raise CheckpointError("no checkpoint can be loaded: " + "; ".join(failures))
    return None
