"""What every engine's checkpoints share: the error that stops a resume, and the reader of the
checkpoints our retired CPU engine wrote (`<run>/checkpoints/step_00000050/` with one
`pp_XXXX_tp_YYYY.pt` shard per (pp, tp) rank and `meta.json`), which experiments-eval and
experiments-export still read. Shards are loaded with `weights_only=True`: we never unpickle
arbitrary objects.
"""

from __future__ import annotations

from pathlib import Path

META = "meta.json"
PREFIX = "step_"


class CheckpointError(RuntimeError):
    """No checkpoint can be resumed from, and starting over would silently lose work."""


def shard_name(pp_rank: int, tp_rank: int) -> str:
    return f"pp_{pp_rank:04d}_tp_{tp_rank:04d}.pt"


def complete_checkpoints(root: Path) -> list[Path]:
    """A retired CPU-engine run's complete checkpoints, newest first (a save in progress
    had a hidden name and no meta.json: never listed)."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / META).is_file()]
    return sorted(found, key=lambda p: p.name, reverse=True)
