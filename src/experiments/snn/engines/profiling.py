"""`trainer.profile_steps`: torch.profiler over a window of training steps.

Why: the question users ask of a topology is where a step's time goes, compute or
communication. The traces go where TensorBoard's PyTorch Profiler tab looks for them
(`<run>/profile`, via torch's own tensorboard_trace_handler), and a two-number digest (step
time, time in collectives) per rank goes into summary.json so sweeps and benchmarks can
compare topologies without opening a trace.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

log = logging.getLogger(__name__)

PROFILE_DIRNAME = "profile"
# Steps before the recorded window: one skipped (first-step allocations, lazy init), one
# warm-up the profiler discards (its own start-up cost).
SKIP_STEPS = 1
WARMUP_STEPS = 1
# Collective kernels as the process-group backends name them (gloo:all_reduce, nccl:send, ...).
COLLECTIVE_PREFIXES = ("gloo:", "nccl:")


class StepProfiler:
    """Profiles `steps` training steps after SKIP_STEPS + WARMUP_STEPS; a no-op when steps=0.

    `digest` holds the figures once the window is recorded (or cut short by the run's end).
    """

    def __init__(self, steps: int, run_dir: Path, rank: int) -> None:
        self.steps = steps
        self.digest: dict[str, float] | None = None
        self._profiler: profile | None = None
        if steps <= 0:
            return
        # Kineto prints start/stop lines and a "gpuGetDeviceCount failed" error on CPU-only
        # machines; read at the profiler's first start, so a user's own setting wins.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        trace_handler = tensorboard_trace_handler(
            str(run_dir / PROFILE_DIRNAME), worker_name=f"rank{rank}"
        )

        def ready(profiler: profile) -> None:
            # Stopped inside the window: the step in progress is not a training step.
            recorded = min(steps, profiler.step_num - SKIP_STEPS - WARMUP_STEPS)
            if recorded <= 0:
                return
            self.digest = digest(profiler, recorded)
            trace_handler(profiler)

        self._profiler = profile(
            activities=[ProfilerActivity.CPU]
            + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else []),
            schedule=schedule(wait=SKIP_STEPS, warmup=WARMUP_STEPS, active=steps, repeat=1),
            on_trace_ready=ready,
        )

    def start(self) -> StepProfiler:
        if self._profiler is not None:
            self._profiler.start()
        return self

    def step(self) -> None:
        """Call once after every training step."""
        if self._profiler is not None:
            self._profiler.step()
            if self.digest is not None:  # window recorded: stop paying for the profiler
                self.stop()

    def stop(self) -> None:
        """Ends the window early if the run ended inside it: the steps recorded so far count."""
        if self._profiler is None:
            return
        self._profiler.stop()
        self._profiler = None
        recorded = int(self.digest["steps"]) if self.digest else 0
        if recorded < self.steps:
            log.warning(
                "trainer.profile_steps=%d: the run ended after %d profiled steps "
                "(the first %d steps are not profiled)",
                self.steps,
                recorded,
                SKIP_STEPS + WARMUP_STEPS,
            )


def digest(profiler: profile, steps: int) -> dict[str, float]:
    """Milliseconds per profiled step (the first `steps` in the trace): its wall time, and
    the wall time during which at least one collective was in flight.

    Collectives on gloo run on the backend's threads: under DDP they overlap the backward pass,
    so the second figure is time communication was happening, not time the step waited for it.
    Where a collective blocks the training thread (FSDP2's all-gather before a block, TP's
    all-reduce, PP's send/recv) the two coincide.
    """
    events = profiler.events()
    ranges = sorted(
        (e.time_range for e in events if e.name.startswith("ProfilerStep")),
        key=lambda r: r.start,
    )[:steps]
    window_end = ranges[-1].end if ranges else float("-inf")
    collectives = sorted(
        (e.time_range.start, min(e.time_range.end, window_end))
        for e in events
        if e.name.startswith(COLLECTIVE_PREFIXES) and e.time_range.start < window_end
    )
    busy_us, covered_to = 0.0, float("-inf")
    for start, end in collectives:  # union of intervals: concurrent collectives count once
        if end > covered_to:
            busy_us += end - max(start, covered_to)
            covered_to = end
    count = max(len(ranges), 1)
    return {
        "steps": len(ranges),
        "step_ms": sum(r.elapsed_us() for r in ranges) / 1e3 / count,
        "collective_ms": busy_us / 1e3 / count,
    }


def summary_metrics(digests: list[dict[str, float] | None]) -> dict[str, Any]:
    """Per-rank lists for summary.json; empty when nothing was profiled."""
    if not digests or any(d is None for d in digests):
        return {}
    return {
        "profile_steps": min(int(d["steps"]) for d in digests),  # type: ignore[index]
        "profile_step_ms_per_rank": [round(d["step_ms"], 3) for d in digests],  # type: ignore[index]
        "profile_collective_ms_per_rank": [
            round(d["collective_ms"], 3)  # type: ignore[index]
            for d in digests
        ],
    }
