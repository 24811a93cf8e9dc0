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

from experiments.run.record import write_json_atomic

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
    if is_writer:
        tmp = partial / f".{shard}.tmp"
        torch.save(state, tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, partial / shard)
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


def load(path: Path, shard: str, recipe: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load one shard of one checkpoint; raises on anything that is not a good checkpoint."""
    meta = json.loads((path / META).read_text(encoding="utf-8"))
    differing = sorted(
        key
        for key in set(recipe) | set(meta.get("recipe", {}))
        if recipe.get(key) != meta.get("recipe", {}).get(key)
    )
    if differing:
        raise CheckpointError(
            f"checkpoint {path} was written by a different config (differs in: "
            f"{', '.join(differing)}); resume=null starts over, or use another hydra.run.dir"
        )
    state = torch.load(path / shard, map_location="cpu", weights_only=True)
    return state, meta


def load_latest(
    root: Path, shard: str, recipe: dict[str, Any]
) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
    """The newest checkpoint that loads; a corrupt one is reported and the previous one used."""
    candidates = complete_checkpoints(root)
    failures = []
    for path in candidates:
        try:
            state, meta = load(path, shard, recipe)
        except CheckpointError:
            raise
        except Exception as error:  # truncated or corrupt files raise many types
            log.warning("checkpoint %s cannot be loaded (%s); trying the previous one", path, error)
            failures.append(f"{path}: {error}")
            continue
        return path, state, meta
    if failures:
        raise CheckpointError(f"no checkpoint in {root} can be loaded: " + "; ".join(failures))
    return None
