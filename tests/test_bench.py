"""The benchmark scripts run and write their table (tiny sizes; no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_benchmarks_run_and_write_their_table(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run_all", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    measures = {row["measure"] for row in results["rows"]}
    assert "step time ratio (ours / hand-written)" in measures
    assert "dry run (sew_resnet18) / vision import" in measures
    topologies = ("single", "ddp", "fsdp2", "channel_tp", "pp")
    assert {f"{t}: images/s" for t in topologies} <= measures
    split = [r["notes"] for r in results["rows"] if r["measure"].endswith(": images/s")]
    assert len(split) == 5 and all("collectives" in notes for notes in split)
    assert "rank 1:" in split[1] and "rank 1:" not in split[0]  # 2 ranks vs 1
    gan = [
        r for r in results["rows"] if r["measure"] == "step time ratio (ours / MMGen train_model)"
    ]
    assert len(gan) == 1
    if importlib.util.find_spec("mmgen") is None:  # the SNN-only install
        assert gan[0]["notes"] == "skipped: mmgen not installed"
    else:
        assert isinstance(gan[0]["value"], float)
    measured = [r for r in results["rows"] if not r["notes"].startswith("skipped")]
    assert all(r["value"] > 0 for r in measured)
    assert "| benchmark | measure | value |" in (tmp_path / "results.md").read_text()
