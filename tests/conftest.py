"""Shared helpers: compose configs in-process like the app does, and run the installed CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from experiments.plan import RunPlan, build_plan

BIN = Path(sys.executable).parent
CLI = str(BIN / "experiments-train")
# Small and fast: a few steps of SEW-ResNet18 at 16x16 take about a second each.
FAST = [
    "trainer.epochs=1",
    "trainer.max_steps=4",
    "data=synthetic",
    "data.train_size=128",
    "data.val_size=64",
    "model.time_steps=2",
]


def compose_run(overrides: list[str]) -> DictConfig:
    with initialize_config_module("experiments.conf", version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def plan_for(overrides: list[str], run_dir: str = "/tmp/experiments-test-run") -> RunPlan:
    cfg = compose_run(overrides)
    return build_plan(cfg, run_dir, overrides, dict(cfg.hydra.runtime.choices))


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_cli(args: list[str], cwd: Path, timeout: float = 600, env: dict | None = None) -> Result:
    """The installed console script, as a user runs it."""
    environment = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **(env or {}),
    }
    proc = subprocess.run(
        [CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def imagefolder(tmp_path: Path) -> Path:
    """A tiny ImageNet-style folder of real PNG files (digits images written to disk)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    root = tmp_path / "imagefolder"
    for split, offset in (("train", 0), ("val", 200)):
        for index in range(offset, offset + 40):
            folder = root / split / str(digits.target[index])
            folder.mkdir(parents=True, exist_ok=True)
            pixels = (digits.images[index] * 15).astype("uint8")
            Image.fromarray(pixels).convert("RGB").resize((32, 32)).save(folder / f"{index}.png")
    return root


_FIGURES: list[str] = []


@pytest.fixture
def figures(request: pytest.FixtureRequest):
    """Measured figures a test reports (printed at the end of the run, never asserted on time)."""

    def report(**values: object) -> None:
        text = ", ".join(f"{key}={value}" for key, value in values.items())
        _FIGURES.append(f"{request.node.nodeid}: {text}")

    return report


def pytest_terminal_summary(terminalreporter) -> None:
    if _FIGURES:
        terminalreporter.section("measured figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-node Slurm cluster (munge, slurmctld, slurmd, slurmdbd), started by the
    repo's script and stopped after the session. Skipped only when the script says Slurm
    cannot start here; its one-line reason is the skip reason."""
    script = REPO / "scripts" / "slurm" / "cluster.sh"
    proc = subprocess.run(
        ["bash", str(script), "start"], capture_output=True, text=True, timeout=900
    )
    if proc.returncode == 3:
        pytest.skip((proc.stdout.strip() or proc.stderr.strip()).splitlines()[-1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield proc.stdout.strip()
    subprocess.run(["bash", str(script), "stop"], capture_output=True, text=True, timeout=300)
