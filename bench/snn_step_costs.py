"""Where the time between two optimizer steps goes on SpikingJelly's loop, outside the model's
forward, backward and optimizer step (issue "Per-step overhead"): one `experiments-train`
run in this process (SEW-ResNet34, T=2, 32 px, batch 8, synthetic data, `logger=none`), each
piece of our per-step work wrapped in a timer, the model's own work timed through the
library's functions, and the process's minor page faults counted per step.

    python -m bench.snn_step_costs [--steps 60] [--log-every 1] [--untuned]

`--untuned` leaves glibc's allocator as it starts (what the engine did before it kept freed
memory: engines/spikingjelly_cpu.py `keep_freed_memory`). Prints one table in ms per step.
No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SPENT: dict[str, float] = defaultdict(float)


def _timed(owner: Any, name: str, label: str) -> Callable[[], None]:
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[label] += time.perf_counter() - started

    setattr(owner, name, timed)
    return lambda: setattr(owner, name, original)


@contextlib.contextmanager
def _instrumented(untuned: bool) -> Iterator[dict[str, list[float]]]:
    """Timers on our per-step work and on the model's own; a clock and a page-fault count at
    each of the loop's step-end synchronize calls."""
    import torch
    from spikingjelly.activation_based.distributed.vision import training

    from experiments.snn.engines import spikingjelly_cpu, spikingjelly_loop

    marks: dict[str, list[float]] = {"time": [], "faults": []}
    undo = [
        _timed(spikingjelly_loop.LoopHooks, "_after_step", "our step hook (all of it)"),
        _timed(spikingjelly_loop.LoopHooks, "_log_step", "  of which: the logged step's record"),
        _timed(spikingjelly_loop.Progress, "update", "  of which: the progress bar"),
        _timed(spikingjelly_loop.Evaluations, "after", "our epoch record (per step)"),
        _timed(training, "_forward_classification", "model: forward"),
        _timed(torch.Tensor, "backward", "model: backward"),
        _timed(torch.optim.AdamW, "step", "model: optimizer step"),
    ]
    if untuned:
        undo.append(_no_allocator_tuning(spikingjelly_cpu))
    original = spikingjelly_loop.LoopHooks.after_synchronize

    def after_synchronize(self: Any, frame: Any) -> None:
        in_loop = frame is not None and frame.f_code.co_name == "train_classification"
        if in_loop and self.syncs % 2 == 0:  # the call before a step: the previous one's end
            marks["time"].append(time.perf_counter())
            marks["faults"].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        original(self, frame)

    spikingjelly_loop.LoopHooks.after_synchronize = after_synchronize
    try:
        yield marks
    finally:
        spikingjelly_loop.LoopHooks.after_synchronize = original
        for restore in undo:
            restore()


def _no_allocator_tuning(module: Any) -> Callable[[], None]:
    original = module.keep_freed_memory
    module.keep_freed_memory = lambda: False
    return lambda: setattr(module, "keep_freed_memory", original)


def measure(steps: int, log_every: int, untuned: bool) -> dict[str, float]:
    from experiments.train import main

    with tempfile.TemporaryDirectory() as tmp, _instrumented(untuned) as marks:
        saved = sys.argv
        sys.argv = [
            "experiments-train",
            "data=synthetic",
            "data.train_size=4096",
            "data.val_size=64",
            "data.image_size=32",
            "model=sew_resnet34",
            "model.time_steps=2",
            "trainer.batch_size=8",
            "trainer.epochs=1",
            f"trainer.max_steps={steps}",
            "trainer.checkpoint_interval=0",
            f"trainer.log_every_n_steps={log_every}",
            "logger=none",
            f"hydra.run.dir={Path(tmp) / 'run'}",
        ]
        try:
            main()
        finally:
            sys.argv = saved
    warm = 10  # the first steps' allocations and warm-up left out of the medians
    gaps = [b - a for a, b in zip(marks["time"][warm:], marks["time"][warm + 1 :], strict=False)]
    faults = [
        b - a for a, b in zip(marks["faults"][warm:], marks["faults"][warm + 1 :], strict=False)
    ]
    counted = len(marks["time"]) or 1
    # averaged over the run's steps, warm-up included (model: forward also holds the final
    # validation's forwards); the step itself is the median after warm-up
    table = {label: 1000 * seconds / counted for label, seconds in SPENT.items()}
    table["step (median, ms)"] = 1000 * statistics.median(gaps)
    table["minor page faults per step (median)"] = statistics.median(faults)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=1)
    parser.add_argument("--untuned", action="store_true")
    args = parser.parse_args()
    table = measure(args.steps, args.log_every, args.untuned)
    print(
        f"\n{'allocator untuned' if args.untuned else 'allocator tuned'}, "
        f"log_every_n_steps={args.log_every}:"
    )
    for label, value in table.items():
        print(f"  {label:45s} {value:10.2f}")


if __name__ == "__main__":
    main()
