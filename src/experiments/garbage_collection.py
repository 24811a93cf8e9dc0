"""Python's garbage collector while one of our processes starts, and from its first step on.

Before its first training step a run's process imports torch, torch._dynamo, DTensor,
SpikingJelly and Hydra (a GAN run mmcv and mmgen too), composes and builds: about 360,000
objects, nearly all of which live as long as the process. Under Python's default thresholds
(700, 10, 10) the collector runs some 800 times while they arrive, six of them full
collections that walk everything built so far: 0.8-1.0 CPU-s of a 4-step SEW-ResNet18 run
(`bench/start_up_gc.py`, BENCHMARKS.md). A fresh process per run, per rank and per Slurm task
pays that each time.

So the package raises the first threshold when it is imported, before any of those imports
(`experiments/__init__.py`): the young generation is collected 70 times less often and no full
collection comes during start-up. Each engine ends that when its library's loop starts
(SpikingJelly's loop: at its first step, the first place our hooks see inside it; the classic
Trainer: its first epoch; MMGen: its runner's `before_run`):
- what is alive then is frozen (`gc.freeze`): later collections no longer walk it, where the
  first older-generation collection after start-up would walk all of it once (~0.2 CPU-s).
  Of the ~360,000 objects, ~1,700 were garbage in reference cycles on that run: what the
  freeze keeps for the process's life;
- Python's thresholds are back, so the loop runs under the collector it was written for, and
  garbage in reference cycles it makes (a tensor held by one among them) is freed as soon as
  it would be without us.

A process that never trains (a torchrun launch's owner, a sweep's login, experiments-eval)
keeps the raised threshold: it allocates little once it has started.
"""

from __future__ import annotations

import gc

# The first generation's threshold until the first step: a start-up's ~600,000 container
# allocations make about a dozen young collections, where Python's 700 makes some 800.
START_UP_THRESHOLD = 50_000

_python_thresholds: tuple[int, ...] | None = None  # set while a start-up defers collection


def defer_while_starting() -> None:
    """Collect the young generation less often until `end_start_up` (once a process: a second
    call keeps the thresholds found by the first)."""
    global _python_thresholds
    if _python_thresholds is not None:
        return
    _python_thresholds = gc.get_threshold()
    first, *older = _python_thresholds
    gc.set_threshold(max(first, START_UP_THRESHOLD), *older)


def end_start_up() -> None:
    """The library's loop has started: what is alive now (the modules, the model, the loaders:
    it lives as long as the process) leaves the collector's generations (`gc.freeze`), and the
    thresholds this process had before our package was imported are back. Cheap enough for
    every step; it acts once."""
    global _python_thresholds
    if _python_thresholds is None:
        return
    gc.freeze()
    gc.set_threshold(*_python_thresholds)
    _python_thresholds = None
