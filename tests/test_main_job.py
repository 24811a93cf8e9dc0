"""The README's main job, exactly as `make train` runs it (the main-job recipe, no other
overrides)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import REPO, read_jsonl, run_cli
from .support import processes


def make_train_overrides() -> list[str]:
    """The overrides `make train` passes (its recipe line in the Makefile), so that this test
    runs what the README's first command runs and cannot drift from it."""
    lines = (REPO / "Makefile").read_text().split("\ntrain:", 1)[1].splitlines()
    (command,) = [line.strip() for line in lines[1:3] if "experiments-train" in line]
    words = command.split()
    assert words[0] == ".venv/bin/experiments-train" and words[-1] == "$(ARGS)", command
    return words[1:-1]


def head_commit() -> str | None:
    """The repository's HEAD (the installed package is this checkout); None where the tests
    run from a copy that is no git checkout (`make mutants`' scratch copies)."""
    if not (REPO / ".git").exists():
        return None
    proc = processes.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@dataclass
class MainJob:
    run_dir: Path
    stdout: str
    stderr: str
    wall_s: float
    commits: set[str | None]


@pytest.fixture(scope="module")
def main_job(module_tmp: Callable[[str], Path]) -> MainJob:
    """`make train`'s command, run once: the accuracy target and the run-directory contract
    are both read from it (the suite's longest SNN run is not made twice)."""
    root = module_tmp("main_job")
    overrides = make_train_overrides()
    assert overrides == ["experiment=digits_sew_resnet18"]  # the main job is its recipe
    commit_before = head_commit()  # others may commit while the run trains
    started = time.perf_counter()
    result = run_cli(overrides, cwd=root, timeout=480)  # the longest run of the suite
    wall = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = list((root / "outputs" / "runs").glob("*/*"))
    return MainJob(run_dir, result.stdout, result.stderr, wall, {commit_before, head_commit()})


@pytest.mark.slow
def test_main_job_reaches_the_accuracy_target(main_job: MainJob, figures) -> None:
    summary = json.loads((main_job.run_dir / "summary.json").read_text())
    metrics = summary["metrics"]
    figures(
        wall_s=round(main_job.wall_s, 1),
        val_accuracy=round(metrics["val_accuracy"], 4),
        images_per_second=round(metrics["images_per_second"], 1),
        steps=metrics["steps"],
    )
    assert summary["model"] == "sew_resnet18" and summary["data"] == "digits"
    # measured: 0.9583 at 1 and 2 threads, 0.951-0.990 over seeds 1-4 (README)
    assert metrics["val_accuracy"] >= 0.90
    assert str(main_job.run_dir) in main_job.stdout


@pytest.mark.slow
def test_the_main_job_writes_the_run_directory_contract(main_job: MainJob) -> None:
    """What every run leaves, read on the main job's directory: the final report, the
    progress bar, Hydra's record, per-epoch metrics, the summary (command, versions, the
    commit that ran, the seed), the checkpoints and TensorBoard's events."""
    run_dir = main_job.run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    final = summary["metrics"]
    assert f"val_accuracy  {final['val_accuracy']:.4f}" in main_job.stdout
    assert f"images/s      {final['images_per_second']:.1f}" in main_job.stdout
    assert "step/s" in main_job.stderr or "s/step" in main_job.stderr  # tqdm, on stderr

    hydra_dir = run_dir / ".hydra"
    assert {"config.yaml", "overrides.yaml", "hydra.yaml"} <= {p.name for p in hydra_dir.iterdir()}
    assert "experiment=digits_sew_resnet18" in (hydra_dir / "overrides.yaml").read_text()

    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["epoch"] for m in metrics] == [1, 2, 3, 4]
    for record in metrics:
        assert {
            "step",
            "epoch",
            "train_loss",
            "val_loss",
            "val_accuracy",
            "images_per_second",
            "peak_memory_mb",
        } <= set(record)
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]  # it learns

    assert summary["status"] == "completed"
    assert (summary["model"], summary["topology"], summary["launcher"]) == (
        "sew_resnet18",
        "single",
        "local",
    )
    assert (summary["world_size"], summary["engine"], summary["backend"]) == (
        1,
        "spikingjelly",
        "gloo",
    )
    assert summary["mesh"]["shape"] == [1, 1, 1]
    assert summary["metrics"]["steps"] == 180
    assert summary["metrics"]["val_accuracy"] == pytest.approx(metrics[-1]["val_accuracy"])
    assert summary["metrics"]["val_loss"] == pytest.approx(metrics[-1]["val_loss"])
    for key in ("train_loss", "images_per_second"):
        assert summary["metrics"][key] > 0
    assert summary["command"] == "experiments-train experiment=digits_sew_resnet18"
    assert {"torch", "spikingjelly", "hydra-core", "experiments"} <= set(summary["versions"])
    # The commit of the code that ran (a run outside the repo finds it from the package);
    # "-dirty" when tracked files differ from it.
    if main_job.commits == {None}:  # no git checkout: nothing to record
        assert summary["git_commit"] is None
    else:
        commit, _, dirty = summary["git_commit"].partition("-")
        assert commit in main_job.commits and dirty in ("", "dirty"), summary["git_commit"]
    assert summary["seed"] == 1234  # the recipe's

    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["step_00000150", "step_00000180"]  # interval 50, keep 2, the last
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_the_main_job_measures_spikes_and_energy_at_every_evaluation(main_job: MainJob) -> None:
    """What SNN papers report, read on the main job's run: per layer and evaluation its firing
    rate, silent and saturated fractions on the same 32 validation images; the network's
    mean rate, synaptic operations, MACs and energy per image from SpikingJelly's energy model
    with its cost constants; in spikes.json, metrics.jsonl, summary.json, the completed
    lines, TensorBoard (a scalar per layer, a histogram) and spikes.png."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = main_job.run_dir
    record = json.loads((run_dir / "spikes.json").read_text())
    assert record["cost_constants_pj"]["e_mac_pj"] == 4.6
    assert record["cost_constants_pj"]["e_ac_pj"] == 0.9
    assert record["slice"] == {"images": 32, "seed": 0}
    evaluations = record["evaluations"]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [e["step"] for e in evaluations] == [m["step"] for m in metrics] == [45, 90, 135, 180]
    for evaluation, epoch in zip(evaluations, metrics, strict=True):
        assert evaluation["images"] == 32
        layers = evaluation["layers"]
        assert len(layers) == 20 and layers[0]["layer"] == "sn1"  # SEW-ResNet18's LIF layers
        assert all(0 <= layer["silent"] <= 1 and 0 <= layer["saturated"] <= 1 for layer in layers)
        spikes = sum(layer["firing_rate"] * layer["neurons"] for layer in layers)
        assert evaluation["firing_rate"] == pytest.approx(
            spikes / sum(layer["neurons"] for layer in layers)  # neuron-weighted (same T)
        )
        assert 0 < evaluation["firing_rate"] < 1 and evaluation["synops_per_image"] > 0
        costs = record["cost_constants_pj"]
        compute = evaluation["macs_per_image"] * costs["e_mac_pj"]
        compute += evaluation["acs_per_image"] * costs["e_ac_pj"]
        assert evaluation["energy_per_image_mj"] == pytest.approx(compute * 1e-9)
        for key in ("firing_rate", "synops_per_image", "energy_per_image_mj"):
            assert epoch[key] == evaluation[key]
    final = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert final["energy_per_image_mj"] == evaluations[-1]["energy_per_image_mj"]
    assert final["firing_rate"] == evaluations[-1]["firing_rate"]
    assert f"firing rate   {final['firing_rate']:.4f}" in main_job.stdout
    assert f"energy        {final['energy_per_image_mj']:.4g} mJ per image" in main_job.stdout
    assert (run_dir / "spikes.png").stat().st_size > 10_000
    (events,) = (run_dir / "tensorboard").glob("events.out.tfevents.*")
    tags = EventAccumulator(str(events), size_guidance={"histograms": 0}).Reload().Tags()
    assert "spikes/firing_rate/layer4.1.sn2" in tags["scalars"]
    assert "spikes/energy_per_image_mj" in tags["scalars"]
    assert "spikes/layer_firing_rates" in tags["histograms"]
