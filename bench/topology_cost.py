"""Benchmark 4: images/s and peak RSS per rank of each topology on CPU ranks, same model
(SEW-ResNet18, T=2, 16px) and the same global batch (32), and where a step's time goes
(compute vs. collectives in flight, from `trainer.profile_steps`)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.common import logged_times, row, step_seconds, train

GLOBAL_BATCH = 32
QUICK_TOPOLOGIES = ("single", "pp")
TOPOLOGIES = {
    "single": ["topology=single", f"trainer.batch_size={GLOBAL_BATCH}"],
    "ddp": ["topology=ddp", f"trainer.batch_size={GLOBAL_BATCH // 2}"],
    "fsdp2": ["topology=fsdp2", f"trainer.batch_size={GLOBAL_BATCH // 2}"],
    "channel_tp": ["topology=channel_tp", f"trainer.batch_size={GLOBAL_BATCH}"],
    "pp": ["topology=pp", f"trainer.batch_size={GLOBAL_BATCH}", "topology.pipeline_microbatches=2"],
}


def _train(name: str, steps: int, root: Path, extra: list[str]) -> dict:
    launcher = [] if name == "single" else ["launcher=torchrun", "launcher.nproc_per_node=2"]
    root.mkdir(parents=True, exist_ok=True)
    run_dir = train(
        [
            "data=synthetic",
            "data.train_size=4096",
            "data.val_size=64",
            "model.time_steps=2",
            "trainer.epochs=1",
            f"trainer.max_steps={steps}",
            "trainer.checkpoint_interval=0",
            f"trainer.log_every_n_steps={max(1, steps // 6)}",
            *launcher,
            *TOPOLOGIES[name],
            *extra,
        ],
        root / name,
    )
    return {"dir": run_dir, **json.loads((run_dir / "summary.json").read_text())["metrics"]}


def _time_split(metrics: dict) -> str:
    """Per rank: step ms, and ms of it with a collective in flight (trainer.profile_steps)."""
    pairs = zip(
        metrics["profile_step_ms_per_rank"], metrics["profile_collective_ms_per_rank"], strict=True
    )
    return "; ".join(
        f"rank {rank}: step {step:.0f} ms, collectives {comm:.0f} ms ({comm / step:.0%})"
        for rank, (step, comm) in enumerate(pairs)
    )


def measure(steps: int, profile_steps: int, quick: bool = False) -> list[dict]:
    """Throughput from an unprofiled run, then where a step's time goes from a short run
    under torch.profiler (separate, so the profiler's own cost stays out of images/s).

    quick: one short profiled run of single and of pp (one rank, and the topology whose
    ranks differ most) gives both (images/s then includes the profiler's cost). That each
    topology trains correctly is the test suite's job (tests/test_topologies.py); the quick
    mode only checks that this script measures and splits a step."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in QUICK_TOPOLOGIES if quick else TOPOLOGIES:
            profile = [f"trainer.profile_steps={profile_steps}"]
            if quick:
                timed = profiled = _train(name, profile_steps + 2, Path(tmp) / "quick", profile)
            else:
                timed = _train(name, steps, Path(tmp) / "timed", [])
                profiled = _train(name, profile_steps + 2, Path(tmp) / "profiled", profile)
            seconds = step_seconds(logged_times(timed["dir"]), skip=1)
            memory = timed["peak_memory_mb_per_rank"]
            rows.append(
                row(
                    "4. Topology cost (CPU, 2 ranks)",
                    f"{name}: images/s",
                    GLOBAL_BATCH / seconds,
                    notes=f"peak RSS per rank (MB): {[round(m) for m in memory]}; "
                    + _time_split(profiled)
                    + ("; quick: timed under the profiler" if quick else ""),
                )
            )
    return rows
