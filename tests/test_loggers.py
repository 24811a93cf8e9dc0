"""The logger group: each logger read back through its own API or files after a tiny SNN
run and a 2-point sweep (a GAN run's: test_gan.py, on the tiny run that suite makes anyway);
loggers that cannot work refused before launch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.snn.spikes_file import read as read_spikes

from .conftest import SITE, on_python_path, plan_for, read_jsonl, run_cli
from .support.logger_records import (
    csv_rows,
    history,
    mlflow_runs,
    same,
    tensorboard_events,
    tensorboard_histograms,
)
from .support.wandb_records import read_run

ALL = "logger=[tensorboard,csv,mlflow,wandb]"
SNN = [
    "data=synthetic",
    "data.train_size=32",
    "data.val_size=16",
    "model.time_steps=2",
    "trainer.batch_size=16",
    "trainer.epochs=2",
    "trainer.log_every_n_steps=1",
]


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


# ------------------------------------------------------------------ runs


@pytest.fixture(scope="module")
def snn_run(module_tmp: Callable[[str], Path]) -> Path:
    root = module_tmp("snn")
    result = run_cli([*SNN, ALL, f"hydra.run.dir={root / 'run'}"], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mlflow ui --backend-store-uri sqlite:///" in result.stdout
    return root / "run"


@pytest.mark.slow
def test_snn_run_in_every_logger(snn_run: Path) -> None:
    steps = jsonl(snn_run / "steps.jsonl")
    epochs = jsonl(snn_run / "metrics.jsonl")
    summary = json.loads((snn_run / "summary.json").read_text())
    losses = [(r["step"], r["loss"]) for r in steps]
    accuracy = [(r["step"], r["val_accuracy"]) for r in epochs]
    assert len(losses) == 4 and len(accuracy) == 2

    # MLflow: params (the flat config), per-step and per-epoch history, tags, final, artefacts
    client, runs = mlflow_runs(snn_run)
    (run,) = runs
    assert run.info.status == "FINISHED"
    assert run.data.params["trainer.batch_size"] == "16"
    assert run.data.params["optimizer.lr"] == str(summary_lr(snn_run))
    assert run.data.tags["model"] == "sew_resnet18" and run.data.tags["topology"] == "single"
    assert same(history(client, run.info.run_id, "train/loss"), losses)
    assert same(history(client, run.info.run_id, "epoch/val_accuracy"), accuracy)
    final = summary["metrics"]["val_accuracy"]
    assert run.data.metrics["final/val_accuracy"] == pytest.approx(final)
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["plan.json", "spikes.png"]

    # W&B offline: the run record, config, history rows with their steps, summary, files
    wandb = read_run(snn_run)
    record = wandb["runs"][0]
    assert "model=sew_resnet18" in record.tags and record.display_name.startswith("data=synthetic")
    assert wandb["config"]["trainer"]["batch_size"] == 16
    logged = [(h["_step"], h["train/loss"]) for h in wandb["history"] if "train/loss" in h]
    assert same(logged, losses)
    assert wandb["summary"]["final/val_accuracy"] == pytest.approx(final)
    assert {"plan.json", "spikes.png"} <= set(wandb["files"])

    # CSV: a row per logged step, a column per metric
    rows = csv_rows(snn_run)
    assert same([(int(r["step"]), float(r["train/loss"])) for r in rows if r["train/loss"]], losses)
    assert {"epoch/val_accuracy", "epoch/val_loss"} <= set(rows[0])

    # TensorBoard: scalars, and the HParams view (config vs final metrics)
    scalars, hparams = tensorboard_events(snn_run / "tensorboard")
    assert same(scalars["train/loss"], losses)
    assert same(scalars["final/val_accuracy"], [(0, final)])
    assert hparams["trainer.batch_size"] == 16 and hparams["model.time_steps"] == 2

    # Spikes, measured at each evaluation: the network's figures and each layer's rate in
    # every logger, equal to spikes.json; TensorBoard also draws the layers' rates' histogram
    measured = read_spikes(snn_run)
    assert [r["step"] for r in measured] == [step for step, _ in accuracy]
    layer = measured[-1]["layers"][-1]["layer"]
    expected = {
        "spikes/firing_rate": [(r["step"], r["firing_rate"]) for r in measured],
        "spikes/energy_per_image_mj": [(r["step"], r["energy_per_image_mj"]) for r in measured],
        f"spikes/firing_rate/{layer}": [
            (r["step"], r["layers"][-1]["firing_rate"]) for r in measured
        ],
    }
    for key, values in expected.items():
        assert same(history(client, run.info.run_id, key), values)
        assert same([(h["_step"], h[key]) for h in wandb["history"] if key in h], values)
        assert same([(int(r["step"]), float(r[key])) for r in rows if r[key]], values)
        assert same(scalars[key], values)
    histograms = tensorboard_histograms(snn_run / "tensorboard", "spikes/layer_firing_rates")
    assert [step for step, _ in histograms] == [r["step"] for r in measured]
    assert histograms[-1][1] == len(measured[-1]["layers"])  # one value per layer


def summary_lr(run_dir: Path) -> float:
    import yaml

    return yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["optimizer"]["lr"]


@pytest.mark.slow
def test_a_sweep_is_one_experiment_and_one_group(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            "-m",
            *SNN,
            "trainer.epochs=1",
            "optimizer.lr=1e-3,3e-3",
            "logger=[tensorboard,csv,mlflow,wandb]",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    client, runs = mlflow_runs(sweep)  # the store is the sweep's
    (experiment,) = {r.info.experiment_id for r in runs}
    assert client.get_experiment(experiment).name == sweep.name
    points = sorted(
        (r for r in runs if r.data.tags.get("kind") != "report"), key=lambda r: r.data.tags["point"]
    )
    assert [r.data.params["optimizer.lr"] for r in points] == ["0.001", "0.003"]
    assert [
        "optimizer.lr=0.001" in points[0].info.run_name,
        "optimizer.lr=0.003" in points[1].info.run_name,
    ] == [True, True]
    assert {r.data.tags["sweep"] for r in points} == {sweep.name}
    (report,) = [r for r in runs if r.data.tags.get("kind") == "report"]
    shipped = {a.path for a in client.list_artifacts(report.info.run_id)}
    assert {"report.md", "report.csv", "learning_curves.png", "metric_vs_optimizer.lr.png"} <= (
        shipped
    )
    groups = {read_run(sweep / point)["runs"][0].run_group for point in ("0", "1")}
    assert groups == {sweep.name}
    for point, lr in (("0", 0.001), ("1", 0.003)):
        _, hparams = tensorboard_events(sweep / point / "tensorboard")
        assert hparams["optimizer.lr"] == lr
        rows = csv_rows(sweep / point)
        steps = [(r["step"], r["loss"]) for r in jsonl(sweep / point / "steps.jsonl")]
        assert same(
            [(int(r["step"]), float(r["train/loss"])) for r in rows if r["train/loss"]], steps
        )


# ------------------------------------------------------------------ refused before launch


def test_an_unreachable_mlflow_server_is_refused_before_launch() -> None:
    with pytest.raises(ConfigError) as refused:
        plan_for(["logger=mlflow", "logger.mlflow.tracking_uri=http://127.0.0.1:9"])
    assert refused.value.key == "logger.mlflow.tracking_uri"
    assert "reachable MLflow server" in str(refused.value)


def test_wandb_online_without_a_login_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    with pytest.raises(ConfigError) as refused:
        plan_for(["logger=wandb", "logger.wandb.mode=online"])
    assert refused.value.key == "logger.wandb.mode" and "wandb login" in str(refused.value)


def test_an_unknown_logger_setting_names_the_nearest_key() -> None:
    with pytest.raises(ConfigError) as refused:
        plan_for(["logger=mlflow", "+logger.mlflow.experiment=x"])
    assert "did you mean logger.mlflow.experiment_name?" in str(refused.value)


@pytest.mark.slow
def test_a_logger_that_is_not_installed_is_one_line_before_launch(tmp_path: Path) -> None:
    env = {
        "EXPERIMENTS_TEST_HIDE_MODULES": "wandb",
        "PYTHONPATH": on_python_path(SITE),
    }
    result = run_cli([*SNN, "logger=[tensorboard,wandb]"], cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: invalid config: logger='wandb': wandb is not installed: make setup-loggers "
        "(or pip install '.[loggers]' in the checkout), or leave it out of logger="
    ]
    assert not (tmp_path / "outputs").exists()


# ------------------------------------------------------------------ failures and resumes


def test_a_resumed_run_keeps_its_csv_rows_up_to_the_checkpoint(tmp_path: Path) -> None:
    """A resumed run's CSV goes on from the checkpoint, as metrics.jsonl does: the rows up to
    it kept as they were, the later ones replaced."""
    from experiments.loggers import RunInfo
    from experiments.loggers.csv import CSVLogger

    info = RunInfo(tmp_path, "run", None, None, {"trainer": {"batch_size": 16}})
    first = CSVLogger({}, info)
    first.start()
    for step in range(1, 6):
        first.log({"train/loss": float(step)}, step)
    first.log({"epoch/val_accuracy": 0.5}, 5)  # a new column: the file is rewritten
    resumed = CSVLogger({}, info)  # a new process, resuming from step 3
    resumed.start()
    resumed.truncate(after_step=3)
    resumed.log({"train/loss": 40.0}, 4)
    rows = csv_rows(tmp_path)
    assert [(r["step"], r["train/loss"]) for r in rows] == [
        ("1", "1.0"),
        ("2", "2.0"),
        ("3", "3.0"),
        ("4", "40.0"),
    ]
    assert "epoch/val_accuracy" in rows[0]


@pytest.mark.slow
def test_an_snn_logger_failing_mid_run_is_dropped_and_the_run_goes_on(tmp_path: Path) -> None:
    """The CSV store fails at its 2nd write, step 2 (test-only sitecustomize): one warning, the
    CSV is never written again (its step-1 row stays; the epoch's metrics would be a second),
    TensorBoard and steps.jsonl get every step, the run completes."""
    run_dir = tmp_path / "run"
    result = run_cli(
        [*SNN, "trainer.epochs=1", "logger=[tensorboard,csv]", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env={
            "PYTHONPATH": on_python_path(SITE),
            "EXPERIMENTS_TEST_FAIL_CSV_LOG": "2",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    log = (run_dir / "train.log").read_text()
    assert log.count("logger csv failed in log") == 1 and "injected failure" in log
    steps = [r["step"] for r in read_jsonl(run_dir / "steps.jsonl")]
    assert steps == [1, 2]
    assert [row["step"] for row in csv_rows(run_dir)] == ["1"]  # nothing after the failure
    scalars, _ = tensorboard_events(run_dir / "tensorboard")
    assert [step for step, _ in scalars["train/loss"]] == steps  # the other logger: every step


@pytest.mark.gan
def test_a_failing_mmcv_logger_hook_never_stops_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mmcv's MLflow hook against a store it cannot open: the guarded hook logs once and
    turns itself off instead of raising out of the runner."""
    from types import SimpleNamespace

    pytest.importorskip("mmgen")
    from mmcv.runner import HOOKS

    from experiments.gan import engine as gan_mmgen

    gan_mmgen.mmgen_compat.import_mmgen()
    gan_mmgen._register_record_hook()
    monkeypatch.chdir(tmp_path)  # whatever MLflow might create lands here
    (tmp_path / "a_file").write_text("")  # a store under a file: MLflow cannot create it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/a_file/mlflow.db")
    hook = HOOKS.get("ExperimentsMlflowLoggerHook")(tags={"a": "b"}, log_model=False)
    runner = SimpleNamespace(hooks=[])  # before_run fails before it reads more of a runner
    hook.before_run(runner)
    assert hook.failed
    hook.log(runner)  # off: would fail on this runner otherwise
    hook.after_run(runner)
    import mlflow

    assert mlflow.active_run() is None  # nothing left for MLflow's atexit to end in ./mlflow.db
