"""Benchmark 3: wall time of `experiments-train dry_run=true` vs. the import of SpikingJelly's
distributed vision package (the issue's baseline), alternated, medians.

SpikingJelly's own `model.sew_resnet` module imports torchvision (and through it
torch._dynamo), ~1.5 s that the bare vision-package import does not pay. So the dry run is also
measured for Spikformer-Ti (whose module does not), and the SEW-ResNet dry run against the
import of the vision package plus the SEW-ResNet module.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import BIN, row, run

VISION = "import spikingjelly.activation_based.distributed.vision"
VISION_SEW = VISION + "; import spikingjelly.activation_based.model.sew_resnet"


def measure(repeats: int) -> list[dict]:
    times: dict[str, list[float]] = {k: [] for k in ("sew", "tiny", "vision", "vision_sew")}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for _ in range(repeats):
            times["sew"].append(run([str(BIN / "experiments-train"), "dry_run=true"], cwd))
            times["vision"].append(run([sys.executable, "-c", VISION], cwd))
            times["tiny"].append(
                run([str(BIN / "experiments-train"), "model=spikformer_tiny", "dry_run=true"], cwd)
            )
            times["vision_sew"].append(run([sys.executable, "-c", VISION_SEW], cwd))
    m = {k: statistics.median(v) for k, v in times.items()}
    return [
        row(
            "3. Start-up",
            "dry run (sew_resnet18) / vision import",
            m["sew"] / m["vision"],
            "<= 1.5",
            m["sew"] / m["vision"] <= 1.5,
            "SpikingJelly's sew_resnet module imports torchvision; see the next rows",
        ),
        row(
            "3. Start-up",
            "dry run (spikformer_tiny) / vision import",
            m["tiny"] / m["vision"],
            "<= 1.5",
            m["tiny"] / m["vision"] <= 1.5,
        ),
        row(
            "3. Start-up",
            "dry run (sew_resnet18) / vision + sew_resnet import",
            m["sew"] / m["vision_sew"],
            "<= 1.5",
            m["sew"] / m["vision_sew"] <= 1.5,
        ),
        row(
            "3. Start-up",
            "wall times (s), medians",
            m["sew"],
            notes=f"dry run sew_resnet18 {m['sew']:.2f}, spikformer_tiny {m['tiny']:.2f}; "
            f"import vision {m['vision']:.2f}, vision+sew_resnet {m['vision_sew']:.2f}; "
            f"{repeats} alternating runs",
        ),
    ]
