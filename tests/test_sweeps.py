"""Sweeps as users run them: real multiruns through the CLI, a failing point, the report,
re-runs that skip finished points, presets, an Optuna search."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from experiments.report import write_report

from .conftest import (
    BIN,
    NO_SPIKES,
    SLURM_FSDP2_TP,
    compose_run,
    plan_for,
    read_jsonl,
    run_cli,
    unreadable_imagefolder,
)
from .support import processes

pytestmark = pytest.mark.slow

FAST = [
    "data=imagefolder",
    "data.num_classes=10",
    "data.image_size=32",
    "model.time_steps=2",
    "trainer.batch_size=8",
    "trainer.max_steps=2",
    "trainer.log_every_n_steps=1",
    "seed=11",  # not the default (1234): the points must record the seed they were given
    *NO_SPIKES,  # no test here reads spike figures
]
SEED = 11
# Points in sweep order: data.root (good, unreadable) x optimizer.lr (1e-3, 3e-3).
LR = {"0": 1e-3, "1": 3e-3, "2": 1e-3, "3": 3e-3}


@pytest.fixture(scope="module")
def sweep(module_tmp: Callable[[str], Path], imagefolder_session: Path) -> dict:
    """One sweep with points that fail at run time: their images are not images (a folder
    without classes would be refused before any point runs)."""
    root = module_tmp("sweep")
    broken = unreadable_imagefolder(root / "broken")
    args = [
        "-m",
        *FAST,
        f"data.root={imagefolder_session},{broken}",
        "optimizer.lr=1e-3,3e-3",
    ]
    result = run_cli(args, cwd=root)
    assert (root / "outputs" / "multiruns").is_dir(), result.stderr[-3000:]
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
    for name in ("2", "3"):
        assert "cannot identify image file" in summaries[name]["error"], summaries[name]["error"]
    assert "2 completed, 2 failed" in result.stdout
    assert "FAILED point 2" in result.stdout and "FAILED point 3" in result.stdout
    for name, summary in summaries.items():
        assert summary["seed"] == SEED, name  # every point records the seed it was given
    for name in ("0", "1"):  # what the completed points' workers actually trained with
        point = sweep["dir"] / name
        (written,) = point.glob("checkpoints/step_*/config.json")  # SpikingJelly's recipe
        recipe = json.loads(written.read_text())
        assert recipe["seed"] == SEED, name
        assert recipe["optimizer_kwargs"]["lr"] == pytest.approx(LR[name]), name
        logged = [record["lr"] for record in read_jsonl(point / "metrics.jsonl")]
        assert logged and all(lr == pytest.approx(LR[name]) for lr in logged), (name, logged)


def test_report_has_a_table_and_readable_plots(sweep: dict) -> None:
    sweep_dir = sweep["dir"]
    with open(sweep_dir / "report.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [row["status"] for row in table] == ["completed", "completed", "failed", "failed"]
    assert [row["point"] for row in table] == ["0", "1", "2", "3"]
    assert [float(row["optimizer.lr"]) for row in table] == [LR[p] for p in "0123"]
    assert [row["seed"] for row in table] == [str(SEED)] * 4
    for row in table[:2]:  # the table's metrics are the points' own
        point = json.loads((sweep_dir / row["point"] / "summary.json").read_text())
        assert float(row["val_accuracy"]) == pytest.approx(point["metrics"]["val_accuracy"])
    assert {"data.root", "optimizer.lr", "val_accuracy", "wall_time_s", "images_per_second"} <= set(
        table[0]
    )
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
    proc = processes.run([str(BIN / "experiments-report"), str(copy)], timeout=120)
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
    # ImageNet's 1000 classes do not match the test folder's 10 (refused, rightly)
    "sew_resnet34_imagenet": ["data.root={root}", "data.num_classes=10"],
    "spikformer_8_384_imagenet": ["data.root={root}", "data.num_classes=10"],
}


def _pinned(node: object, prefix: str = "") -> dict[str, object]:
    """The values a preset file sets, as flat keys (its defaults list aside)."""
    if isinstance(node, dict):
        flat: dict[str, object] = {}
        for key, value in node.items():
            if key != "defaults":
                flat.update(_pinned(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): node}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_experiment_presets_compose_and_validate(name: str, imagefolder: Path) -> None:
    extra = [value.format(root=imagefolder) for value in PRESETS[name]]
    plan = plan_for([f"experiment={name}", *extra])
    if name == "sew_resnet34_imagenet":
        assert plan.global_batch == 256 and plan.training_config.batch_size == 256
        # the Slurm layout is an override of the one preset, not a preset of its own
        slurm = plan_for([f"experiment={name}", *extra, *SLURM_FSDP2_TP, "trainer.precision=bf16"])
        assert slurm.dims.mesh_shape == (16, 1, 2) and slurm.engine == "spikingjelly"
        assert slurm.training_config.precision.mode == "bf16"
        assert slurm.global_batch == 256 and slurm.training_config.batch_size == 16
    if name == "spikformer_8_384_imagenet":  # an override of 8-512's recipe: its model only
        assert plan.choices["model"] == "spikformer_8_384" and plan.global_batch == 192
    if name == "digits_sew_resnet18":
        assert plan.choices["model"] == "sew_resnet18" and plan.choices["data"] == "digits"
    # every value the preset pins reaches the composed config, unless the test overrides it
    from importlib import resources

    from omegaconf import OmegaConf

    preset = resources.files("experiments.conf") / "experiment" / f"{name}.yaml"
    composed = compose_run([f"experiment={name}", *extra])
    overridden = {value.split("=")[0] for value in extra}
    for key, value in _pinned(yaml.safe_load(preset.read_text())).items():
        if key not in overridden:
            assert OmegaConf.select(composed, key) == value, key
    # command-line overrides still win over a preset
    assert plan_for([f"experiment={name}", *extra, "seed=9"]).training_config.seed == 9


def test_presets_listed() -> None:
    from importlib import resources

    names = {p.name for p in (resources.files("experiments.conf") / "experiment").iterdir()}
    assert {f"{name}.yaml" for name in PRESETS} <= names


def test_optuna_search_over_learning_rate_finishes_with_a_clear_winner(
    tmp_path: Path, figures
) -> None:
    """The preset's search, on synthetic data (2 epochs of 16 steps a trial). Its TPE seed
    draws the 3 start-up trials at the same places of the (wider) interval every time:
    ~6e-5, ~6e-4 and ~3e-3; only the last learns within this budget."""
    sweep_dir = tmp_path / "search"
    result = run_cli(
        [
            "hparams_search=digits_lr",
            "data=synthetic",
            "data.train_size=256",
            "data.val_size=64",
            "model.time_steps=2",
            "trainer.batch_size=16",
            "trainer.epochs=2",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.params={optimizer.lr:'tag(log, interval(1e-5, 1e-1))'}",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = write_report(sweep_dir)
    assert outcome["counts"] == {"completed": 3}
    lrs = [float(row["optimizer.lr"]) for row in outcome["rows"]]
    assert len(set(lrs)) == 3 and all(1e-5 <= lr <= 1e-1 for lr in lrs)  # searched, in range
    best, worst = outcome["best"], outcome["worst"]
    figures(
        best_lr=best["optimizer.lr"],
        best=best["val_accuracy"],
        worst_lr=worst["optimizer.lr"],
        worst=worst["val_accuracy"],
    )
    assert best["val_accuracy"] - worst["val_accuracy"] >= 0.2
    assert "Best val_accuracy" in (sweep_dir / "report.md").read_text()
    # Optuna's own result names the winner the runs returned (their val_accuracy).
    optimization = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert optimization["best_value"] == pytest.approx(best["val_accuracy"])
    assert optimization["best_params"]["optimizer.lr"] == pytest.approx(float(best["optimizer.lr"]))
