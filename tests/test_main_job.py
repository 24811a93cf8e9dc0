"""The README's main job, exactly as `make train` runs it (no overrides)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .conftest import run_cli


@pytest.mark.slow
def test_main_job_reaches_the_accuracy_target(tmp_path: Path, figures) -> None:
    started = time.perf_counter()
    result = run_cli([], cwd=tmp_path, timeout=480)  # the longest run of the suite
    wall = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = list((tmp_path / "outputs" / "runs").glob("*/*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = summary["metrics"]
    figures(
        wall_s=round(wall, 1),
        val_accuracy=round(metrics["val_accuracy"], 4),
        images_per_second=round(metrics["images_per_second"], 1),
        steps=metrics["steps"],
    )
    assert summary["model"] == "sew_resnet18" and summary["data"] == "digits"
    assert metrics["val_accuracy"] >= 0.85
    assert str(run_dir) in result.stdout
