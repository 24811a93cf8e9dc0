"""Where a GAN run's MMGen checkpoints lie, and which one is the newest that loads.

Apart from engine.py because evaluate.py and sample.py find a run's checkpoint too, and must
not import the training engine (its MMGen runner, DDP and hook machinery) to do so.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from experiments.gan.recipes import CHECKPOINT_DIRNAME

log = logging.getLogger("experiments.gan")


def checkpoint_dir(run_dir: Path) -> Path:
    """Where MMGen's CheckpointHook writes: <work_dir>/ckpt/<basename of work_dir>/."""
    return run_dir / CHECKPOINT_DIRNAME / run_dir.resolve().name


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest iter_N.pth that loads. Our saves are atomic (hooks.py); a torn or foreign
    file under that name (MMGen's own tools write in place) is skipped for the one before."""
    found = []
    for path in checkpoint_dir(run_dir).glob("iter_*.pth"):
        try:
            found.append((int(path.stem.split("_", 1)[1]), path))
        except ValueError:
            continue
    for _, path in sorted(found, reverse=True):
        try:
            torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # truncated or foreign file
            log.warning("skipping unreadable checkpoint %s (%s)", path, error)
            continue
        return path
    return None
