"""Sweeps as users run them: real multiruns through the CLI, a failing point, the report,
re-runs that skip finished points, presets, an Optuna search."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from experiments.report import write_report

from .conftest import BIN, plan_for, run_cli

pytestmark = pytest.mark.slow

FAST = [
    "data=imagefolder",
    "data.num_classes=10",
    "data.image_size=32",
    "model.time_steps=2",
    "trainer.batch_size=8",
    "trainer.max_steps=2",
    "trainer.log_every_n_steps=1",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One sweep with a point that fails at run time: its image folder has no classes."""
    from PIL import Image
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("sweep")
    digits = load_digits()
    for split, offset in (("train", 0), ("val", 200)):
        for index in range(offset, offset + 40):
            folder = root / "good" / split / str(digits.target[index])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((digits.images[index] * 15).astype("uint8")).convert("RGB").resize(
                (32, 32)
            ).save(folder / f"{index}.png")
        (root / "empty" / split).mkdir(parents=True)
    args = ["-m", *FAST, f"data.root={root / 'good'},{root / 'empty'}", "optimizer.lr=1e-3,3e-3"]
    result = run_cli(args, cwd=root)
    (sweep_dir,) = list((root / "outputs" / "multiruns").iterdir())
    return {"root": root, "args": args, "result": result, "dir": sweep_dir}


def test_failing_point_is_recorded_and_the_others_still_run(sweep: dict) -> None:
    result = sweep["result"]
    assert result.returncode == 1
    summaries = {
        p.name: json.loads((p / "summary.json").read_text())
        for p in sweep["dir"].iterdir()
        if p.is_dir() and p.name.isdigit()
    }
    assert sorted(summaries) == ["0", "1", "2", "3"]
    statuses = {name: s["status"] for name, s in summaries.items()}
    assert statuses == {"0": "completed", "1": "completed", "2": "failed", "3": "failed"}
    assert "Couldn't find any class folder" in summaries["2"]["error"]
    assert "2 completed, 2 failed" in result.stdout
    assert "FAILED point 2" in result.stdout and "FAILED point 3" in result.stdout
    for summary in summaries.values():
        assert summary.get("seed", 1234) == 1234  # every point records its seed


def test_report_has_a_table_and_readable_plots(sweep: dict) -> None:
    sweep_dir = sweep["dir"]
    with open(sweep_dir / "report.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [row["status"] for row in table] == ["completed", "completed", "failed", "failed"]
    assert {"data.root", "optimizer.lr", "val_accuracy", "wall_time_s", "images_per_second"} <= set(
        table[0]
    )
    assert float(table[0]["val_accuracy"]) >= 0
    markdown = (sweep_dir / "report.md").read_text()
    assert "2 completed, 2 failed" in markdown
    assert "| point | data.root | optimizer.lr | status |" in markdown
    for name in ("learning_curves.png", "metric_vs_optimizer.lr.png", "metric_vs_data.root.png"):
        assert (sweep_dir / name).stat().st_size > 10_000
        assert f"({name})" in markdown


def test_report_rebuilds_from_run_directories_alone(sweep: dict, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(sweep["dir"], copy)
    for name in ("report.csv", "report.md", "learning_curves.png", "multirun.yaml"):
        (copy / name).unlink()
    import subprocess

    proc = subprocess.run(
        [str(BIN / "experiments-report"), str(copy)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1  # a point failed
    assert "4 points (2 completed, 2 failed)" in proc.stdout
    assert (copy / "report.csv").read_text() == (sweep["dir"] / "report.csv").read_text()
    assert (copy / "learning_curves.png").exists()


def test_rerunning_the_sweep_skips_completed_points(sweep: dict) -> None:
    before = {n: (sweep["dir"] / n / "summary.json").read_text() for n in ("0", "1")}
    again = run_cli(sweep["args"], cwd=sweep["root"])
    assert again.returncode == 1  # the broken points fail again
    assert again.stdout.count("Run already completed") == 2
    for name, text in before.items():
        assert (sweep["dir"] / name / "summary.json").read_text() == text


PRESETS = {
    "digits_sew_resnet18": [],
    "spikformer_cifar10_ddp": ["data.root={root}"],
    "sew_resnet34_imagenet_fsdp2_tp_slurm": ["data.root={root}"],
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_experiment_presets_compose_and_validate(name: str, imagefolder: Path) -> None:
    extra = [value.format(root=imagefolder) for value in PRESETS[name]]
    plan = plan_for([f"experiment={name}", *extra])
    if name == "sew_resnet34_imagenet_fsdp2_tp_slurm":
        assert plan.dims.mesh_shape == (16, 1, 2) and plan.engine == "spikingjelly"
        assert plan.training_config.precision.mode == "bf16"
    if name == "spikformer_cifar10_ddp":
        assert plan.dims.world_size == 8 and plan.training_config.batch_size == 64
    if name == "digits_sew_resnet18":
        assert plan.choices["model"] == "sew_resnet18" and plan.training_config.epochs == 8
    # command-line overrides still win over a preset
    assert plan_for([f"experiment={name}", *extra, "seed=9"]).training_config.seed == 9


def test_presets_listed(imagefolder: Path) -> None:
    from importlib import resources

    names = {p.name for p in (resources.files("experiments.conf") / "experiment").iterdir()}
    assert {f"{name}.yaml" for name in PRESETS} <= names


def test_optuna_search_over_learning_rate_finishes_with_a_clear_winner(
    tmp_path: Path, figures
) -> None:
    sweep_dir = tmp_path / "search"
    result = run_cli(
        [
            "hparams_search=digits_lr",
            "hydra.sweeper.n_trials=3",  # the preset's 2 epochs per trial
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = write_report(sweep_dir)
    assert outcome["counts"] == {"completed": 3}
    best, worst = outcome["best"], outcome["worst"]
    figures(
        best_lr=best["optimizer.lr"],
        best=best["val_accuracy"],
        worst_lr=worst["optimizer.lr"],
        worst=worst["val_accuracy"],
    )
    assert best["val_accuracy"] - worst["val_accuracy"] >= 0.2
    assert "Best val_accuracy" in (sweep_dir / "report.md").read_text()
    optimization = (sweep_dir / "optimization_results.yaml").read_text()
    assert "best_value" in optimization
