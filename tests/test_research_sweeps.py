"""Research sweeps (issue 29): seeds as replicates in the report, a search whose pruner stops
the plainly worse trials, and early stopping that keeps its best checkpoint. Each on the
real CLI with tiny synthetic runs; refusals in-process."""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from optuna.trial import TrialState

from experiments.errors import ConfigError
from experiments.snn.engines.spikingjelly_checkpoints import read_shard
from experiments.sweepers import pruning

from .conftest import (
    MAX_TIMEOUT,
    NO_SPIKES,
    SITE,
    TINY_POINT,
    on_python_path,
    plan_for,
    read_jsonl,
    run_cli,
    run_cli_in_process,
)
from .support.studies import study_trials

pytestmark = pytest.mark.slow

TINY = TINY_POINT
# The runs whose tests read no spike figures (the seed sweep's report reads them: TINY).
TINY_NO_SPIKES = [*TINY, *NO_SPIKES]
SLURM = ["launcher=slurm", "launcher.mem_gb=4", "launcher.cpus_per_task=1"]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# ---------------------------------------------------------------- seeds as replicates


@pytest.fixture(scope="module")
def seed_sweep(module_tmp: Callable[[str], Path]) -> dict:
    """3 seeds x 2 learning rates, one epoch each. Point 5 (seed 3, lr 0.002) fails for real:
    its directory holds a checkpoint another config wrote, which resume=auto refuses to
    load (CheckpointError), as a stale directory would."""
    root = module_tmp("seeds")
    sweep_dir = root / "sweep"
    stale = sweep_dir / "5" / "checkpoints" / "step_00000001"
    (stale / "pp_0000_tp_0000").mkdir(parents=True)  # complete, as SpikingJelly's are
    (stale / "pp_0000_tp_0000" / ".metadata").write_bytes(b"")
    recipe = {"pipeline_parallel_size": 1, "tensor_parallel_size": 1, "other": "config"}
    (stale / "config.json").write_text(json.dumps(recipe))
    result = run_cli(
        [
            "-m",
            *TINY,
            "trainer.epochs=1",
            "seed=1,2,3",
            "optimizer.lr=0.001,0.002",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=root,
        timeout=MAX_TIMEOUT,  # 6 points: ~70 s at load 9, ~280 s at load 16
    )
    return {"dir": sweep_dir, "result": result}


def test_seeds_are_grouped_as_replicates(seed_sweep) -> None:
    sweep_dir, result = seed_sweep["dir"], seed_sweep["result"]
    assert result.returncode == 1, result.stderr[-3000:]  # a point failed: the sweep says so
    points = {int(p.name): summary(p) for p in sweep_dir.iterdir() if p.name.isdigit()}
    assert len(points) == 6
    assert points[5]["status"] == "failed" and "different config" in points[5]["error"]

    def override(record: dict, key: str) -> str:
        (value,) = [o.split("=", 1)[1] for o in record["overrides"] if o.startswith(f"{key}=")]
        return value

    with open(sweep_dir / "report_seeds.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [row["optimizer.lr"] for row in table] != []
    assert sorted(row["optimizer.lr"] for row in table) == ["0.001", "0.002"]
    for row in table:
        members = [r for r in points.values() if override(r, "optimizer.lr") == row["optimizer.lr"]]
        completed = [r for r in members if r["status"] == "completed"]
        failed = [r for r in members if r["status"] == "failed"]
        assert int(row["n"]) == 3 and int(row["n_completed"]) == len(completed)
        assert int(row["n_failed"]) == len(failed)
        assert row["failed_seeds"] == " ".join(override(r, "seed") for r in failed)
        # the spikes' figures too (SpikingJelly's monitor and op counter, each evaluation)
        for metric in (
            "val_accuracy",
            "val_loss",
            "train_loss",
            "firing_rate",
            "energy_per_image_mj",
        ):
            values = [r["metrics"][metric] for r in completed]
            assert float(row[f"{metric}_mean"]) == pytest.approx(statistics.fmean(values))
            assert float(row[f"{metric}_std"]) == pytest.approx(statistics.stdev(values))
            # 95 % Student-t: t(0.975, n-1) * std / sqrt(n) either side of the mean
            half = {2: 12.7062, 3: 4.3027}[len(values)] * statistics.stdev(values)
            half /= math.sqrt(len(values))
            low, high = float(row[f"{metric}_ci95_low"]), float(row[f"{metric}_ci95_high"])
            assert (low, high) == pytest.approx(
                (statistics.fmean(values) - half, statistics.fmean(values) + half), rel=1e-4
            )
    by_lr = {row["optimizer.lr"]: row for row in table}
    assert (by_lr["0.002"]["n_failed"], by_lr["0.002"]["failed_seeds"]) == ("1", "3")
    assert by_lr["0.001"]["n_failed"] == "0"
    means = [float(row["val_accuracy_mean"]) for row in table]
    assert means == sorted(means, reverse=True)  # ranked by the mean, best first

    report = (sweep_dir / "report.md").read_text()
    top = report.split("## Points")[0]  # the seeds' table comes first
    assert "## Seeds as replicates: val_accuracy over seeds, ranked by mean" in top
    assert (
        f"Best configuration by mean val_accuracy: optimizer.lr={table[0]['optimizer.lr']}" in top
    )
    assert "| 0.002 | 3 | 2 | 1 (seed 3) |" in top  # the failed seed, counted and shown
    for figure in ("seeds_objective.png", "seeds_learning_curves.png"):
        assert (sweep_dir / figure).stat().st_size > 10_000, figure
        assert f"]({figure})" in report
    assert "best configuration by mean val_accuracy over seeds" in result.stdout
    assert "1 failed seed(s) counted" in result.stdout


# ---------------------------------------------------------------- pruning


@pytest.fixture(scope="module")
def pruned_search(module_tmp: Callable[[str], Path]) -> dict:
    """The preset's TPE search, 3 trials over a learning rate that trains and one that
    diverges (lr=inf: its losses are NaN from the first epoch), 3 epochs each, the median
    pruner after one completed trial. Sampler seed 11 draws good, inf, inf (the TPE's random
    start-up trials on this choice, the same in Optuna 2.10 and 5.1)."""
    root = module_tmp("pruned")
    sweep_dir = root / "search"
    result = run_cli(
        [
            "hparams_search=digits_lr",
            *TINY_NO_SPIKES,
            "trainer.epochs=3",
            "hydra.sweeper.params={optimizer.lr:'choice(0.001,inf)'}",
            "hydra.sweeper.sampler.seed=11",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.pruner=median",
            "+hydra.sweeper.pruner_kwargs.n_startup_trials=1",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=root,
        timeout=MAX_TIMEOUT,  # 3 trials: ~30 s on a fast day
    )
    return {"dir": sweep_dir, "result": result}


def test_pruned_trials_stop_early_marked_in_study_and_report(pruned_search) -> None:
    sweep_dir, result = pruned_search["dir"], pruned_search["result"]
    assert result.returncode == 0, result.stderr[-3000:]  # pruned is no failure
    trials = study_trials(sweep_dir)
    assert [t.params["optimizer.lr"] for t in trials] == [0.001, math.inf, math.inf]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert len(pruned) == 2, [(t.number, t.state, t.params) for t in trials]
    first_completed = min(t.number for t in trials if t.state == TrialState.COMPLETE)
    for trial in trials:
        run_dir = sweep_dir / str(trial.number)
        record = summary(run_dir)
        epochs = read_jsonl(run_dir / "metrics.jsonl")
        if trial.params["optimizer.lr"] == math.inf and trial.number > first_completed:
            # stopped after its first evaluation: 1 of 3 epochs, the study and the run agree
            assert trial.state == TrialState.PRUNED
            assert trial.intermediate_values == {1: -math.inf}
            assert record["status"] == "pruned" and len(epochs) == 1
            assert record["pruned"]["step"] == 1 and record["pruned"]["trial"] == trial.number
        elif trial.params["optimizer.lr"] == 0.001:
            assert trial.state == TrialState.COMPLETE and record["status"] == "completed"
            assert len(epochs) == 3 and sorted(trial.intermediate_values) == [1, 2, 3]
            assert trial.value == pytest.approx(record["metrics"]["val_accuracy"])
    assert f"{len(pruned)} pruned" in result.stdout
    with open(sweep_dir / "report.csv", newline="") as handle:
        statuses = {row["point"]: row["status"] for row in csv.DictReader(handle)}
    assert {str(t.number) for t in pruned} == {p for p, s in statuses.items() if s == "pruned"}
    report = (sweep_dir / "report.md").read_text()
    assert f"{len(pruned)} pruned" in report.splitlines()[2]


def test_pruner_settings_are_refused_before_the_search(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "search"
    result = run_cli_in_process(
        [
            "hparams_search=digits_lr",
            *TINY,
            "hydra.sweeper.pruner=mean",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "error: invalid config: hydra.sweeper.pruner='mean': one of median, hyperband, "
        "wilcoxon, none"
    ]
    # nothing of the search was written (the sweep directory's launch lock is run/lock.py's)
    assert [p.name for p in sweep_dir.iterdir()] in ([], [".sweep.lock"])
    assert not (tmp_path / "outputs").exists()
    # the pruner's own arguments, checked against Optuna's class (in-process: same check)
    with pytest.raises(ConfigError) as refused:
        pruning.check("median", {"n_warmup": 1})
    assert str(refused.value) == (
        "invalid config: hydra.sweeper.pruner_kwargs.n_warmup=1: did you mean "
        "hydra.sweeper.pruner_kwargs.n_warmup_steps?"
    )
    with pytest.raises(ConfigError, match="startup trials cannot be negative"):
        pruning.check("median", {"n_startup_trials": -1})
    assert pruning.check("hyperband", {"min_resource": 1}) == ("hyperband", {"min_resource": 1})


# ---------------------------------------------------------------- early stopping

# val_accuracy cannot rise by more than 1.0: a plateau from the first epoch on, while the
# weights still train (the best checkpoint and the last one differ).
PLATEAU = [
    "trainer.early_stopping.patience=1",
    "trainer.early_stopping.min_delta=1.0",
]


def test_spikingjellys_loop_stops_on_a_plateau_and_keeps_its_best_checkpoint(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            *TINY_NO_SPIKES,
            *PLATEAU,
            "trainer.epochs=5",
            "trainer.checkpoint_interval=1",
            "trainer.keep_checkpoints=5",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = summary(run_dir)
    stopped = record["early_stopping"]
    assert record["status"] == "completed" and record["metrics"]["steps"] == 2
    assert len(read_jsonl(run_dir / "metrics.jsonl")) == 2  # 2 of 5 epochs
    assert stopped["stopped"] and (stopped["stopped_at_step"], stopped["stopped_at_epoch"]) == (
        2,
        2,
    )
    assert (stopped["best_step"], stopped["metric"], stopped["mode"]) == (1, "val_accuracy", "max")
    assert "did not improve by more than 1.0 for 1 evaluation" in stopped["reason"]
    best = Path(stopped["best_checkpoint"])
    assert best == run_dir / "checkpoints" / "best" / "step_00000001"

    def weights(folder: Path) -> dict:
        return read_shard(folder / "pp_0000_tp_0000")["model"]

    kept, first, last = (
        weights(best),
        weights(run_dir / "checkpoints" / "step_00000001"),
        weights(run_dir / "checkpoints" / "step_00000002"),
    )
    assert all(torch.equal(kept[k], first[k]) for k in first)  # the best epoch's weights
    assert not all(torch.equal(kept[k], last[k]) for k in last)  # not the last ones
    assert not (run_dir / "checkpoints" / "step_00000003").exists()


def test_classic_trainer_stops_on_a_plateau_and_keeps_its_best_checkpoint(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "trainer=classify",
            *TINY_NO_SPIKES,
            *PLATEAU,
            "trainer.epochs=5",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = summary(run_dir)
    stopped = record["early_stopping"]
    assert record["status"] == "completed" and record["metrics"]["epochs"] == 2
    assert stopped["stopped"] and stopped["stopped_at_epoch"] == 2 and stopped["best_epoch"] == 1
    folder = run_dir / "checkpoints" / "pt" / "classify"
    assert Path(stopped["best_checkpoint"]) == folder / "checkpoint_best.pth"
    from experiments.snn.classify_plan import _torch_load

    best, latest = (
        _torch_load(folder / "checkpoint_best.pth"),
        _torch_load(folder / "checkpoint_latest.pth"),
    )
    assert (best["epoch"], latest["epoch"]) == (0, 1)  # the Trainer counts epochs from 0
    assert not all(torch.equal(best["model"][k], latest["model"][k]) for k in latest["model"])


@pytest.mark.gan
def test_gan_run_stops_on_a_plateau_and_keeps_its_best_checkpoint(gan_search: dict) -> None:
    """Trial 0 of the GAN search below (the learning rate that trains): its loss_gen never
    improves by 1e9, so it stops after 2 of 8 iterations and keeps the best one's checkpoint."""
    run_dir = gan_search["dir"] / "0"
    assert gan_search["result"].returncode == 0, gan_search["result"].stderr[-3000:]
    record = summary(run_dir)
    stopped = record["early_stopping"]
    assert record["status"] == "completed"
    assert (stopped["metric"], stopped["mode"]) == ("loss_gen", "min")
    assert stopped["stopped"] and (stopped["stopped_at_step"], stopped["best_step"]) == (2, 1)
    assert record["metrics"]["steps"] == 2
    assert read_jsonl(run_dir / "metrics.jsonl")[-1]["step"] == 2
    folder = Path(stopped["best_checkpoint"]).parent
    assert Path(stopped["best_checkpoint"]).name == "best.pth"
    best = torch.load(folder / "best.pth", map_location="cpu", weights_only=True)
    assert best["meta"]["iter"] == 1
    assert (folder / "iter_2.pth").is_file()  # the stopped iteration saved as the last one
    assert not (folder / "iter_4.pth").exists()


def test_a_resumed_run_continues_its_early_stopping_count() -> None:
    """On resume the monitor replays the evaluations the run's records keep (those up to the
    checkpoint it resumed): its best, its best step and epoch, how many evaluations in a row
    did not improve, how many there were; nothing is reported to a study again."""
    from experiments.run.early_stopping import EarlyStopping, Monitor

    settings = EarlyStopping("val_accuracy", "max", patience=3, min_delta=0.01)
    records = [
        {"step": 10, "epoch": 1, "val_accuracy": 0.50},
        {"step": 20, "epoch": 2, "val_accuracy": 0.70},
        {"step": 30, "epoch": 3, "val_accuracy": 0.705},  # within min_delta: no improvement
        {"step": 40, "epoch": 4, "val_accuracy": 0.60},
    ]
    straight = Monitor(settings, "val_accuracy", {})
    for record in records:
        straight.after_evaluation(record["step"], record["epoch"], record)
    resumed = Monitor(settings, "val_accuracy", {})
    resumed.replay(records)
    state = ("best", "best_step", "best_epoch", "bad", "evaluations")
    assert [getattr(resumed, k) for k in state] == [getattr(straight, k) for k in state]
    assert [getattr(resumed, k) for k in state] == [0.70, 20, 2, 2, 4]
    assert resumed.summary["early_stopping"]["best_step"] == 20
    # the next evaluation without improvement uses up the patience, as it would have
    assert resumed.after_evaluation(50, 5, {"val_accuracy": 0.65}).stop


def test_early_stopping_keys_are_refused_before_launch() -> None:
    cases = [
        (
            ["trainer.early_stopping.patience=0"],
            "trainer.early_stopping.patience=0: an integer >= 1",
        ),
        (
            ["trainer.early_stopping.patience=2", "trainer.early_stopping.metric=val_acc"],
            "trainer.early_stopping.metric='val_acc': one of auto, val_accuracy",
        ),
        (
            ["trainer.early_stopping.patience=2", "trainer.early_stopping.mode=up"],
            "trainer.early_stopping.mode='up': one of auto, max, min",
        ),
        (
            ["trainer.early_stopping.patience=2", "trainer.early_stopping.min_delta=-1"],
            "trainer.early_stopping.min_delta=-1.0: a number >= 0",
        ),
        (
            ["+trainer.early_stopping.patiense=2"],
            "trainer.early_stopping.patiense=2: not a key of trainer.early_stopping; did you mean "
            "trainer.early_stopping.patience?",
        ),
        (
            [
                "model=dcgan",
                "trainer.early_stopping.patience=2",
                "trainer.early_stopping.metric=val_loss",
            ],
            "trainer.early_stopping.metric='val_loss': one of auto, loss_gen, loss_disc",
        ),
    ]
    for overrides, message in cases:
        gan = "model=dcgan" in overrides
        with pytest.raises(ConfigError) as refused:
            plan_for(["data=digits" if gan else "data=synthetic", *overrides])
        assert str(refused.value).startswith(f"invalid config: {message}"), overrides
    # SpikingJelly's own loop stops early through its evaluation hook
    stopping = plan_for(["data=synthetic", "trainer.early_stopping.patience=2"]).early_stopping
    assert (stopping.patience, stopping.metric, stopping.mode) == (2, "val_accuracy", "max")
    assert plan_for(["data=synthetic"]).early_stopping is None  # off by default


# ---------------------------------------------------------------- Slurm: n_jobs in flight


@pytest.mark.slurm
def test_slurm_search_refills_a_finished_trials_slot_and_prunes_from_its_jobs(
    slurm_cluster, tmp_path: Path
) -> None:
    """One Slurm search for two promises. n_jobs=2, 3 trials over the epochs (1 or 10) and
    the learning rate (0.001 or inf: NaN losses from the first epoch), the median pruner
    after one completed trial; sampler seed 142 draws (1, 0.001) and (10, 0.001) first, then
    (10, inf). Each one-step epoch sleeps 2 s after its step (EXPERIMENTS_TEST_STEP_SLEEP):
    the long trial runs 18 s or more longer than the short one on any machine, well over
    the search's 5 s poll, so it still runs when the short one ends. (Before, 60 epochs
    trained flat out for the same gap: ~10 s on a quiet machine, 100 s at load 5, CPU that
    nothing read; at 20 both ended within one poll.)
    - In flight: the short trial ends long before the long one, and trial 2 is submitted in
      its slot while the long one still runs (in fixed batches it would wait for both).
    - Parallel Slurm jobs against one storage: the first two trials run as one job array of
      two jobs, and each completed trial's value in the study is its job's val_accuracy.
    - Pruning from Slurm jobs: trial 2's job reports its first epoch to the study's journal
      (the default storage, safe on a shared filesystem), is stopped there (1 of 10 epochs)
      and ends PRUNED in the study, `pruned` in its summary.json and the report. The long
      trial is not pruned: its first epoch is the short one's (same seed, data and first
      step), not worse than the median."""
    sweep_dir = tmp_path / "search"
    result = run_cli(
        [
            "hparams_search=digits_lr",
            *TINY_NO_SPIKES,
            *SLURM,
            "trainer.epochs=choice(10,1)",
            "hydra.sweeper.params={optimizer.lr:'choice(0.001,inf)'}",
            "hydra.sweeper.sampler.seed=142",
            "hydra.sweeper.n_jobs=2",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.pruner=median",
            "+hydra.sweeper.pruner_kwargs.n_startup_trials=1",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": on_python_path(SITE), "EXPERIMENTS_TEST_STEP_SLEEP": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    trials = study_trials(sweep_dir)
    draws = [(t.params["trainer.epochs"], t.params["optimizer.lr"]) for t in trials]
    assert draws == [(1, 0.001), (10, 0.001), (10, math.inf)], draws
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2 + [TrialState.PRUNED]
    records = [summary(sweep_dir / str(t.number)) for t in trials]
    assert [r["metrics"]["steps"] for r in records] == [e for e, _ in draws[:2]] + [1]
    arrays = [r["slurm"]["array_job_id"] for r in records]
    assert arrays[0] == arrays[1] and arrays[2] != arrays[0]  # first n_jobs as one array
    assert arrays[0] is not None and len({r["slurm"]["job_id"] for r in records}) == 3
    # the completed trials' values are their jobs' metrics, told to the one storage
    for trial, record in zip(trials[:2], records[:2], strict=True):
        assert record["status"] == "completed"
        assert trial.value == pytest.approx(record["metrics"]["val_accuracy"])
    short, long = sorted(trials[:2], key=lambda t: t.params["trainer.epochs"])
    # the refill: trial 2 asked (and submitted) once the short trial ended, while the long
    # one still ran (in fixed batches it would have waited for both)
    assert short.datetime_complete <= trials[2].datetime_start < long.datetime_complete
    # the pruned trial, from its Slurm job
    pruned, record = trials[2], records[2]
    assert pruned.intermediate_values == {1: -math.inf}
    assert record["status"] == "pruned" and record["pruned"]["step"] == 1
    assert record["slurm"]["job_id"]  # it ran as a Slurm job, and recorded itself there
    assert len(read_jsonl(sweep_dir / "2" / "metrics.jsonl")) == 1  # 1 of 10 epochs
    with open(sweep_dir / "report.csv", newline="") as handle:
        statuses = {row["point"]: row["status"] for row in csv.DictReader(handle)}
    assert statuses == {"0": "completed", "1": "completed", "2": "pruned"}
    assert "1 pruned" in result.stdout


# ---------------------------------------------------------------- GAN trials


GAN_KEY = "+model.cfg_options.optimizer.generator.lr"  # MMGen's optimizer, through cfg_options


@pytest.fixture(scope="module")
def gan_search(module_tmp: Callable[[str], Path]) -> dict:
    """A GAN search minimising swd with the median pruner and early stopping on: 2 trials
    over the generator's learning rate; sampler seed 11 draws one that trains, then one that
    diverges (lr=inf: NaN losses from the first iteration). 8 iterations, a log interval of
    1: each trial measures swd and reports it at every iteration, and asks early stopping
    (loss_gen never improves by 1e9: a plateau from the first interval on)."""
    root = module_tmp("gan_search")
    sweep_dir = root / "search"
    result = run_cli(
        [
            "-m",
            "hydra/sweeper=optuna_resumable",
            "model=dcgan",
            "model.iters=8",
            "model.batch_size=16",
            "model.log_interval=1",
            "model.sample_interval=4",
            "model.checkpoint_interval=4",
            "model.num_samples=16",
            "model.eval_images=16",
            "logger=none",
            "trainer.early_stopping.patience=1",
            "trainer.early_stopping.min_delta=1e9",
            f"{GAN_KEY}=choice(0.0004,inf)",
            "hydra.sweeper.direction=minimize",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=1",  # asked one at a time (hydra-optuna-sweeper's default: 2)
            "hydra.sweeper.sampler.seed=11",
            "hydra.sweeper.pruner=median",
            "+hydra.sweeper.pruner_kwargs.n_startup_trials=1",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=root,
        timeout=MAX_TIMEOUT,
    )
    return {"dir": sweep_dir, "result": result}


@pytest.mark.gan
def test_gan_trials_report_swd_and_a_diverging_one_is_pruned(gan_search: dict) -> None:
    """The trial that trains reports swd at iterations 1 and 2 (then stops early): its last
    report is its final swd (the same seeded measurement). The diverged one is stopped at its
    first report, PRUNED in the study and `pruned` in its record."""
    sweep_dir, result = gan_search["dir"], gan_search["result"]
    assert result.returncode == 0, result.stderr[-3000:]
    trained, diverged = study_trials(sweep_dir)
    assert (trained.params[GAN_KEY], diverged.params[GAN_KEY]) == (0.0004, math.inf)
    record = summary(sweep_dir / "0")
    assert trained.state == TrialState.COMPLETE and record["status"] == "completed"
    assert sorted(trained.intermediate_values) == [1, 2]  # iterations 1 and 2
    assert trained.intermediate_values[2] == pytest.approx(record["metrics"]["swd"], rel=1e-6)
    assert trained.value == pytest.approx(record["metrics"]["swd"])
    record = summary(sweep_dir / "1")
    assert diverged.state == TrialState.PRUNED
    assert diverged.intermediate_values == {1: math.inf}  # NaN losses: the worst swd
    assert record["status"] == "pruned" and record["pruned"]["step"] == 1
    assert record["pruned"]["objective"] == "swd"
    assert not list((sweep_dir / "1").rglob("iter_2.pth"))  # stopped at iteration 1
    assert "1 pruned" in result.stdout


@pytest.mark.gan
def test_trials_that_cannot_report_are_refused_in_a_pruned_search() -> None:
    """Planned at the login with the search's config: a trial that would never report (or
    report NaN) is refused before the search starts, not run to its end unpruned."""
    search = ["hydra/sweeper=optuna_resumable", "hydra.sweeper.pruner=median"]
    search += ["hydra.sweeper.direction=maximize"]
    gan = ["data=digits", "model=dcgan", "hydra.sweeper.direction=minimize"]
    with pytest.raises(ConfigError) as refused:
        plan_for([*search, *gan, "model.eval_images=0"])
    assert str(refused.value) == (
        "invalid config: model.eval_images=0: an integer >= 2: a trial of a search with "
        "hydra.sweeper.pruner=median reports its swd to the pruner at every model.log_interval"
    )
    # without a pruner it plans; an SNN trial reports through SpikingJelly's loop either way
    assert plan_for([*gan, "hydra/sweeper=optuna_resumable", "model.eval_images=0"]).recipe
    assert plan_for([*search, "data=synthetic"]).engine == "spikingjelly"


@pytest.mark.gan
def test_a_search_in_the_direction_opposite_to_its_objective_is_refused() -> None:
    """hydra-optuna-sweeper minimises by default: a search over an SNN's val_accuracy left at
    its default would look for the worst model."""
    optuna_sweeper = ["hydra/sweeper=optuna_resumable", "data=synthetic"]
    cases = [
        (optuna_sweeper, "'minimize': maximize: each trial returns its val_accuracy"),
        ([*optuna_sweeper, "hydra.sweeper.direction=[maximize,minimize]"], "['maximize', "),
        (
            ["hydra/sweeper=optuna_resumable", "model=dcgan", "hydra.sweeper.direction=maximize"],
            "'maximize': minimize: each trial returns its swd (lower is better)",
        ),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError) as refused:
            plan_for(overrides)
        assert str(refused.value).startswith(
            f"invalid config: hydra.sweeper.direction={message}"
        ), str(refused.value)
    maximised = plan_for([*optuna_sweeper, "hydra.sweeper.direction=maximize"])
    assert maximised.engine == "spikingjelly"
    assert plan_for(["hparams_search=digits_lr", "data=synthetic"]).engine == "spikingjelly"
    assert plan_for(["data=synthetic"]).engine == "spikingjelly"  # the basic sweeper: no direction


def test_a_search_is_checked_before_its_study_opens(tmp_path: Path) -> None:
    """The login plans one point of an Optuna search (hydra/sweeper is a hydra override, not
    a point's): refused in one line, exit 2, before the study or any trial directory exists."""
    sweep_dir = tmp_path / "search"
    result = run_cli_in_process(
        [
            "-m",
            "hydra/sweeper=optuna_resumable",
            *TINY,
            "optimizer.lr=interval(1e-4,1e-2)",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "error: invalid config: hydra.sweeper.direction='minimize': maximize: each trial "
        "returns its val_accuracy (higher is better)"
    ]
    assert not sweep_dir.exists() and not (tmp_path / "outputs").exists()


def test_a_search_that_would_not_wait_is_refused_before_anything_is_submitted(
    tmp_path: Path,
) -> None:
    """launcher.wait=false leaves nobody to choose a search's next points (issue 30): one
    line naming the key and what to do instead, exit 2, nothing written, nothing queued."""
    sweep_dir = tmp_path / "search"
    result = run_cli_in_process(
        [
            "-m",
            "hydra/sweeper=optuna_resumable",
            "hydra.sweeper.direction=maximize",
            *TINY,
            "launcher=slurm",
            "launcher.wait=false",
            "optimizer.lr=interval(1e-4,1e-2)",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid config: launcher.wait=false: a search chooses"), line
    assert "use launcher.wait=true" in line
    assert not sweep_dir.exists() and not (tmp_path / "outputs").exists()
