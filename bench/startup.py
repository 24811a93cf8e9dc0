"""Benchmark 3: wall time of `experiments-train dry_run=true` vs. the unavoidable import of
SpikingJelly's distributed vision package. Alternated; medians."""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import BIN, row, run


def measure(repeats: int) -> list[dict]:
    ours, base = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            ours.append(run([str(BIN / "experiments-train"), "dry_run=true"], Path(tmp)))
            base.append(
                run(
                    [
                        sys.executable,
                        "-c",
                        "import spikingjelly.activation_based.distributed.vision",
                    ],
                    Path(tmp),
                )
            )
    ratio = statistics.median(ours) / statistics.median(base)
    return [
        row(
            "3. Start-up",
            "dry run / SpikingJelly import",
            ratio,
            "<= 1.5",
            ratio <= 1.5,
            f"medians of {repeats}: dry run {statistics.median(ours):.2f} s, "
            f"import {statistics.median(base):.2f} s",
        ),
        row("3. Start-up", "dry run wall time (s)", statistics.median(ours)),
        row("3. Start-up", "SpikingJelly import wall time (s)", statistics.median(base)),
    ]
