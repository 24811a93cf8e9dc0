"""Writes tests/data/optuna_2_10_search/sweep: the sweep directory of a pruned search as our
Optuna sweeper left it under Optuna 2.10, killed while its sixth trial trained.

The study is written by the sweeper's own code of that time (commit 9de274a:
experiments.sweepers.optuna's ResumableOptunaSweeperImpl on hydra-optuna-sweeper 1.2.0, and
experiments.sweepers.pruning's TrialReporter for each trial's reports), so its schema,
distributions, attributes and states are what our users' optuna.db files hold. The runs are
stand-ins: each trial's run directory gets the summary.json and metrics.jsonl a tiny run
writes (the keys the search and the report read), with the values listed in OUTCOMES, not a
training run. Run once, with Optuna 2.10.1 installed and that commit's package on the path:

    PYTHONPATH=<checkout of 9de274a>/src <python with optuna==2.10.1> make_fixture.py
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import optuna
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides
from omegaconf import OmegaConf

from experiments.sweepers import pruning
from experiments.sweepers.optuna import ResumableOptunaSweeperImpl

HERE = Path(__file__).resolve().parent
# The search's command line, as Hydra passes its task overrides to the sweeper:
#   experiments-train hparams_search=digits_lr <ARGUMENTS> hydra.sweeper.pruner=median
#       +hydra.sweeper.pruner_kwargs.n_startup_trials=1 hydra.sweep.dir=<the sweep>
ARGUMENTS = [
    "hparams_search=digits_lr",
    "data=synthetic",
    "data.train_size=16",
    "data.val_size=16",
    "data.image_size=8",
    "model.time_steps=1",
    "trainer.batch_size=16",
    "logger=none",
    "trainer.spikes.guard=null",
    "trainer.epochs=2",
]
PARAMS = {"optimizer.lr": "tag(log, interval(1e-4, 1.0))"}  # conf/hparams_search/digits_lr
# How each trial's run went: its val_accuracy after each evaluation (NaN: its losses were not
# finite), and how it ended. The search was killed while the last one trained.
OUTCOMES = [
    ("completed", [0.25, 0.5]),
    ("completed", [0.375, 0.5625]),
    ("pruned", [math.nan]),  # diverged: reported as the worst value, pruned at evaluation 1
    ("failed", []),  # crashed before its first evaluation: the point returned NaN
    ("completed", [0.3125, 0.625]),
    ("running", [0.375]),
]


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        sweep_dir = Path(scratch) / "sweep"  # the path the records name: not this machine's
        write_search(sweep_dir)
        target = HERE / "sweep"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(sweep_dir, target)
    print(f"wrote {target} with optuna {optuna.__version__}")


def write_search(sweep_dir: Path) -> None:
    sweeper = ResumableOptunaSweeperImpl(
        sampler=optuna.samplers.TPESampler(seed=1234, n_startup_trials=4),
        direction="maximize",
        storage=f"sqlite:///{sweep_dir}/optuna.db",
        study_name="digits_lr",
        n_trials=6,
        n_jobs=1,
        search_space=None,
        custom_search_space=None,
        params=OmegaConf.create(PARAMS),
        pruning=("median", {"n_startup_trials": 1}),
    )
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    sweeper.is_grid = False
    sweeper._process_searchspace_config()
    distributions, fixed = create_params_from_overrides(
        [*sweeper._parse_sweeper_params_config(), *ARGUMENTS]
    )
    study = sweeper._open_study(["maximize"])
    sweeper._hold_the_study()
    pruning.write_spec(sweep_dir, sweeper.storage, study.study_name, *sweeper.pruning)
    for status, values in OUTCOMES:
        trial = study.ask()
        (overrides,) = sweeper._configure_trials([trial], distributions, fixed)
        run_dir = sweep_dir / str(trial.number)
        run_dir.mkdir()
        write_run(run_dir, list(overrides), status, values)
        if status == "running":
            return  # killed: never told
        returned = values[-1] if status == "completed" else math.nan
        job = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
        job.return_value = returned
        sweeper._tell(study, trial, job, 1)


def write_run(run_dir: Path, overrides: list[str], status: str, values: list[float]) -> None:
    """What the trial's run recorded, reporting each evaluation to its trial as it went."""
    reporter = pruning.TrialReporter.for_run(run_dir)
    records = []
    for step, value in enumerate(values, start=1):
        loss = math.nan if math.isnan(value) else 2.3 - value
        records.append({"step": step, "epoch": step, "train_loss": loss, "val_accuracy": value})
        (run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
        )
        assert reporter is not None
        pruned = reporter.report(value, step)  # NaN: stored as the worst value
        assert pruned == (status == "pruned"), (run_dir.name, step, value)
    summary = {
        "model": "sew_resnet18",
        "data": "synthetic",
        "topology": "single",
        "launcher": "local",
        "engine": "spikingjelly",
        "world_size": 1,
        "run_dir": str(run_dir),
        "seed": 1234,
        "command": "experiments-train " + " ".join(overrides),
        "overrides": overrides,
        "objective": ["val_accuracy"],
        "status": status,
        "started_at": "2026-12-06T10:00:00+0000",
    }
    if records:
        summary["metrics"] = {**records[-1], "steps": records[-1]["step"]}
    if status == "pruned":
        summary["pruned"] = {
            "step": 1,
            "epoch": 1,
            "evaluation": 1,
            "objective": "val_accuracy",
            "value": math.nan,
            "trial": int(run_dir.name),
        }
    if status == "failed":
        summary["error"] = "RuntimeError: a stand-in for the run's crash"
    if status != "running":
        summary["finished_at"] = "2026-12-06T10:00:05+0000"
        summary["wall_time_s"] = 5.0
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
