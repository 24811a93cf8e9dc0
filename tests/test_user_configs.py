"""A user's own configs, without a reinstall: Hydra's `--config-dir DIR` adds DIR's groups
(`DIR/experiment/mine.yaml`, `DIR/model/...`) to the package's, and every process of the run
composes the same config from it (the torchrun ranks are given the flag again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.dist]

MINE = """\
# @package _global_
defaults:
  - override /data: synthetic
data:
  train_size: 64
  val_size: 32
model:
  time_steps: 2
trainer:
  batch_size: 8
  epochs: 1
  max_steps: 2
  spikes:
    guard: null
"""


def test_an_experiment_in_a_config_dir_trains_on_torchrun_ranks_without_a_reinstall(
    tmp_path: Path,
) -> None:
    """Both ranks compose `experiment=mine` from the user's folder (a rank without the flag
    would fail: no such option in the package's conf/), the record keeps the flag, and the
    command printed to resume the run repeats it."""
    config_dir = tmp_path / "myconf"
    (config_dir / "experiment").mkdir(parents=True)
    (config_dir / "experiment" / "mine.yaml").write_text(MINE)
    run_dir = tmp_path / "run"
    args = ["--config-dir", str(config_dir), "experiment=mine", "topology=ddp"]
    args += ["launcher=torchrun", "launcher.nproc_per_node=2", f"hydra.run.dir={run_dir}"]
    result = run_cli(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["world_size"]) == ("completed", 2)
    assert summary["metrics"]["steps"] == 2  # the user's max_steps, not the package default
    assert f"--config-dir {config_dir} experiment=mine" in summary["resume_command"]
    assert f"--config-dir {config_dir}" in result.stdout.splitlines()[0]  # the resume line
