"""Benchmark 4: images/s and peak RSS per rank of each topology on CPU ranks, same model
(SEW-ResNet18, T=2, 16px) and the same global batch (32)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.common import logged_times, row, step_seconds, train

GLOBAL_BATCH = 32
TOPOLOGIES = {
    "single": ["topology=single", f"trainer.batch_size={GLOBAL_BATCH}"],
    "ddp": ["topology=ddp", f"trainer.batch_size={GLOBAL_BATCH // 2}"],
    "fsdp2": ["topology=fsdp2", f"trainer.batch_size={GLOBAL_BATCH // 2}"],
    "channel_tp": ["topology=channel_tp", f"trainer.batch_size={GLOBAL_BATCH}"],
    "pp": ["topology=pp", f"trainer.batch_size={GLOBAL_BATCH}", "topology.pipeline_microbatches=2"],
}


def measure(steps: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in TOPOLOGIES.items():
            launcher = (
                [] if name == "single" else ["launcher=torchrun", "launcher.nproc_per_node=2"]
            )
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
                    *args,
                ],
                Path(tmp) / name,
            )
            summary = json.loads((run_dir / "summary.json").read_text())
            seconds = step_seconds(logged_times(run_dir), skip=1)
            memory = summary["metrics"]["peak_memory_mb_per_rank"]
            rows.append(
                row(
                    "4. Topology cost (CPU, 2 ranks)",
                    f"{name}: images/s",
                    GLOBAL_BATCH / seconds,
                    notes=f"peak RSS per rank (MB): {[round(m) for m in memory]}",
                )
            )
    return rows
