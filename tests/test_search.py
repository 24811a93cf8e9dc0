"""Optuna searches at the scale searches reach: a study in the sweep directory that a killed
search continues, failed trials that are FAIL in it, and Optuna's own figures of the study.
Trials as parallel Slurm jobs against one storage: test_research_sweeps.py's Slurm search."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from experiments.report.optuna_figures import write_optuna_figures
from experiments.run.search_trial import SPEC
from experiments.sweepers.optuna import INTERRUPTED, ResumableOptunaSweeperImpl

from .conftest import CLI, NO_SPIKES, cli_env, run_cli, unreadable_imagefolder
from .support import processes
from .support.studies import only_study

pytestmark = pytest.mark.slow

# The preset's search on tiny synthetic data: one optimizer step a trial (~5 s each, most of
# it the point's process starting). The wide interval makes the trials' accuracies differ.
SEARCH = [
    "hparams_search=digits_lr",
    "data=synthetic",
    "data.train_size=16",
    "data.val_size=64",
    "data.image_size=8",
    "model.time_steps=1",
    "trainer.batch_size=16",
    "trainer.epochs=1",
    "hydra.sweeper.params={optimizer.lr:'tag(log, interval(1e-4, 1.0))'}",
    *NO_SPIKES,  # no test here reads spike figures
]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def completed(run_dir: Path) -> bool:
    try:
        return summary(run_dir)["status"] == "completed"
    except (OSError, ValueError, KeyError):
        return False


def trial_lr(run_dir: Path) -> float:
    (lr,) = [o.split("=", 1)[1] for o in summary(run_dir)["overrides"] if "optimizer.lr=" in o]
    return float(lr)


@pytest.fixture(scope="module")
def resumed_search(module_tmp: Callable[[str], Path]) -> dict:
    """A search of 6 trials killed (its whole process group) while its 4th trial runs, then
    the same command again, in the same working directory: it finds the same sweep directory."""
    root = module_tmp("search")
    log = root / "killed.log"
    started = time.monotonic()
    with open(log, "w") as output:
        proc = processes.spawn(
            [CLI, *SEARCH], cwd=root, env=cli_env(), stdout=output, stderr=output
        )
    deadline = time.time() + 180
    while not list((root / "outputs" / "multiruns").glob("*/0")):  # the first trial started
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    # The same command in another shell while this search runs: refused, nothing touched.
    second = run_cli(SEARCH, cwd=root)
    while True:
        sweeps = list((root / "outputs" / "multiruns").glob("*"))
        # the first 3 trials completed and the 4th started
        if sweeps and all(completed(sweeps[0] / n) for n in "012") and (sweeps[0] / "3").is_dir():
            break
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    processes.kill(proc, proc.tag)  # SIGKILL: nothing of the search can clean up
    killed_after = time.monotonic() - started
    (sweep_dir,) = sweeps
    before = {n: _record(sweep_dir / n / "summary.json") for n in ("0", "1", "2")}
    # What the kill left on disk decides each started trial's fate: normally the 4th trial
    # was running (FAIL); had its run just completed (Optuna not yet told), it is COMPLETE.
    left = {int(p.name): completed(p) for p in sweep_dir.iterdir() if p.name.isdigit()}
    result = run_cli(SEARCH, cwd=root)
    return {
        "dir": sweep_dir,
        "result": result,
        "second": second,
        "first_pid": proc.pid,
        "before": before,
        "left": left,
        "seconds": (killed_after, time.monotonic() - started - killed_after),
    }


def test_a_second_search_of_the_same_study_is_refused(resumed_search) -> None:
    second = resumed_search["second"]
    assert second.returncode == 2, second.stderr[-3000:]
    # The sweep directory's lock answers first (run/lock.py), naming the running search.
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith("error: sweep ") and " is in use by host " in line, line
    assert f"pid {resumed_search['first_pid']}" in line, line
    # It marked none of the running search's trials: all 6 + the interrupted one are accounted
    # for by the resume test, and the run directories were left alone.


def _record(path: Path) -> tuple[str, int]:
    return path.read_text(), path.stat().st_mtime_ns


def test_killed_search_resumes_to_its_budget_in_the_same_study(resumed_search, figures) -> None:
    sweep_dir, result = resumed_search["dir"], resumed_search["result"]
    figures(
        killed_after_s=round(resumed_search["seconds"][0]),
        resumed_s=round(resumed_search["seconds"][1]),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    study = only_study(sweep_dir)
    assert study.study_name == "digits_lr"
    trials = study.get_trials(deepcopy=False)
    # The trial the kill interrupted is the study's to say: the kill can land while a run
    # trains (its directory not completed), after Optuna asked for the next trial but before
    # its run directory exists, or after a run completed but before Optuna was told (then it
    # is COMPLETE from its summary.json, and no trial was interrupted).
    interrupted = [t.number for t in trials if t.user_attrs.get(INTERRUPTED)]
    figures(interrupted_trials=interrupted)
    assert len(interrupted) <= 1  # one trial at a time (n_jobs=1)
    # n_trials is the study's budget: 6 COMPLETE trials; the trial the kill interrupted is
    # FAIL (marked so) and does not count; trial numbers continue.
    assert [t.number for t in trials] == list(range(6 + len(interrupted)))
    for trial in trials:
        if trial.number in interrupted:
            assert trial.state == TrialState.FAIL, trial.number
            assert not resumed_search["left"].get(trial.number, False), trial.number
        else:
            assert trial.state == TrialState.COMPLETE, trial.number
    # What the kill left on disk agrees: each run it left completed is a COMPLETE trial, and
    # the interrupted trial is the one it left running or the next one Optuna had asked for.
    left = resumed_search["left"]
    assert sorted(left) == list(range(len(left)))
    assert all(trials[n].state == TrialState.COMPLETE for n, done in left.items() if done)
    assert set(interrupted) <= {len(left) - 1, len(left)}, (interrupted, left)
    # Each trial ran in the run directory named after its number: none reused, none skipped
    # (an interrupted trial asked before its run started has none).
    run_dirs = sorted(int(p.name) for p in sweep_dir.iterdir() if p.name.isdigit())
    assert run_dirs == [t.number for t in trials if t.number not in interrupted or t.number in left]
    for trial in trials:
        if trial.state == TrialState.COMPLETE:
            record = summary(sweep_dir / str(trial.number))
            assert record["status"] == "completed"
            assert trial.value == pytest.approx(record["metrics"]["val_accuracy"])
            assert trial.params["optimizer.lr"] == pytest.approx(
                trial_lr(sweep_dir / str(trial.number))
            )
    # The first three run directories are as the killed search left them.
    for name, record in resumed_search["before"].items():
        assert _record(sweep_dir / name / "summary.json") == record, name
    # The resumed sampler drew new points, not its first start-up points again.
    lrs = [t.params["optimizer.lr"] for t in trials if t.state == TrialState.COMPLETE]
    assert len(set(lrs)) == 6
    done = sum(resumed_search["left"].values())  # 3, unless the 4th had just completed
    assert f"{done} of 6 trials done, {6 - done} to go" in result.stdout + result.stderr


def test_optuna_figures_of_the_study(resumed_search, figures) -> None:
    from PIL import Image

    sweep_dir = resumed_search["dir"]
    started = time.monotonic()
    written = write_optuna_figures(sweep_dir)
    figures(optuna_figures_s=round(time.monotonic() - started, 2))
    names = ["optuna_history.png", "optuna_parallel_coordinate.png", "optuna_importances.png"]
    values = {t.value for t in only_study(sweep_dir).get_trials(states=(TrialState.COMPLETE,))}
    assert len(values) >= 2, values  # else importances are (rightly) not drawn
    assert sorted(written) == sorted(names)
    for name in names:
        path = sweep_dir / name
        assert path.stat().st_size > 10_000, name
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) >= 300, (name, image.size)
            grey = np.asarray(image.convert("L"))
            assert len(np.unique(grey)) > 20, name  # drawn, not blank


def test_a_larger_n_trials_continues_the_finished_search(resumed_search) -> None:
    """README: "a larger `n_trials` continues a finished search". The finished search's own
    command with n_trials one higher finds the same sweep directory and study (the budget is
    not part of the sweep's name), runs exactly one more trial, and leaves the others alone."""
    sweep_dir = resumed_search["dir"]
    root = sweep_dir.parents[2]  # <root>/outputs/multiruns/<sweep>: the search's cwd
    before = only_study(sweep_dir).get_trials(deepcopy=False)
    records = {p.name: _record(p / "summary.json") for p in sweep_dir.iterdir() if completed(p)}
    result = run_cli([*SEARCH, "hydra.sweeper.n_trials=7"], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((root / "outputs" / "multiruns").iterdir()) == [sweep_dir]
    trials = only_study(sweep_dir).get_trials(deepcopy=False)
    assert [t.number for t in trials] == [*(t.number for t in before), len(before)]
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 7
    new = trials[-1]
    assert new.state == TrialState.COMPLETE
    assert summary(sweep_dir / str(new.number))["status"] == "completed"
    assert new.value == pytest.approx(
        summary(sweep_dir / str(new.number))["metrics"]["val_accuracy"]
    )
    for name, record in records.items():  # the finished trials were not run again
        assert _record(sweep_dir / name / "summary.json") == record, name


def test_optuna_figures_of_searches_with_nothing_to_show(tmp_path: Path) -> None:
    assert write_optuna_figures(tmp_path / "no-such-sweep") == []
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "optuna.journal").write_text("not a journal\n")
    spec = {"storage": str(tmp_path / "garbage" / "optuna.journal"), "study_name": "search"}
    (tmp_path / "garbage" / SPEC).write_text(json.dumps(spec))
    assert write_optuna_figures(tmp_path / "garbage") == []
    sweep = resumable_sweeper(tmp_path / "started", optuna.samplers.RandomSampler(seed=0))
    study = sweep._open_study(["maximize"])
    sweep._write_spec(study)
    study.ask().suggest_float("optimizer.lr", 1e-4, 1.0, log=True)  # still RUNNING
    assert write_optuna_figures(tmp_path / "started") == []
    study.tell(0, 0.5)  # one trial: no importances (Optuna needs two)
    assert sorted(write_optuna_figures(tmp_path / "started")) == [
        "optuna_history.png",
        "optuna_parallel_coordinate.png",
    ]


def resumable_sweeper(sweep_dir: Path, sampler: optuna.samplers.BaseSampler):
    """The sweeper as Hydra sets it up, as far as settling a study's trials needs."""
    grid = isinstance(sampler, optuna.samplers.GridSampler)
    sweep = ResumableOptunaSweeperImpl(
        sampler={"_target_": f"optuna.samplers.{type(sampler).__name__}"},
        direction="maximize",
        storage=f"{sweep_dir}/optuna.journal",
        study_name=None,
        n_trials=3,
        n_jobs=1,
    )
    sweep.sampler = sampler  # what sweep() builds from the config: here, made by the test
    sweep.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    assert sweep.is_grid == grid
    return sweep


def test_trials_left_running_by_a_killed_search(tmp_path: Path) -> None:
    """The two fates of a trial still RUNNING when a search resumes: its run had completed
    (killed before Optuna was told) -> COMPLETE with the recorded value; else FAIL."""
    sweep_dir = tmp_path / "sweep"
    sweep = resumable_sweeper(sweep_dir, optuna.samplers.RandomSampler(seed=0))
    study = sweep._open_study(["maximize"])
    for _ in range(2):
        study.ask().suggest_float("optimizer.lr", 1e-4, 1.0, log=True)
    (sweep_dir / "0").mkdir()
    (sweep_dir / "0" / "summary.json").write_text(
        json.dumps({"status": "completed", "engine": "cpu", "metrics": {"val_accuracy": 0.75}})
    )
    (sweep_dir / "1").mkdir()
    (sweep_dir / "1" / "summary.json").write_text(json.dumps({"status": "running"}))
    sweep._settle_interrupted(study, 1)
    first, second = study.get_trials()
    assert (first.state, first.value, first.user_attrs) == (TrialState.COMPLETE, 0.75, {})
    assert (second.state, second.user_attrs) == (TrialState.FAIL, {INTERRUPTED: True})


def test_a_grid_search_draws_its_interrupted_point_again(tmp_path: Path) -> None:
    grid = optuna.samplers.GridSampler({"x": [1, 2, 3]})
    sweep = resumable_sweeper(tmp_path / "sweep", grid)
    study = sweep._open_study(["maximize"])
    done, interrupted = study.ask(), study.ask()
    for trial in (done, interrupted):
        trial.suggest_categorical("x", [1, 2, 3])
    study.tell(done, 1.0)
    sweep._settle_interrupted(study, 1)
    drawn = []
    for _ in range(2):
        trial = study.ask()
        drawn.append(trial.suggest_categorical("x", [1, 2, 3]))
        sweep._tell_state(study, trial.number, TrialState.COMPLETE, [0.0])
    # the two points not completed, the interrupted one among them
    assert sorted(drawn) == sorted({1, 2, 3} - {done.params["x"]})


def test_a_failing_trial_is_failed_in_the_study_and_the_search_goes_on(
    tmp_path: Path, imagefolder_session: Path
) -> None:
    """The resumable sweeper on its own (no preset), a grid over two data roots: one whose
    files are not images fails at run time (validation cannot see it); its point returns NaN."""
    broken = unreadable_imagefolder(tmp_path / "broken")
    sweep_dir = tmp_path / "search"
    result = run_cli(
        [
            "-m",
            "hydra/sweeper=optuna_resumable",
            "hydra/sweeper/sampler=grid",
            "hydra.sweeper.direction=maximize",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=1",
            "data=imagefolder",
            "data.num_classes=10",
            "data.image_size=8",
            "model.time_steps=1",
            "trainer.batch_size=16",
            "trainer.max_steps=1",
            f"data.root=choice({imagefolder_session},{broken})",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr[-3000:]  # a point failed: the sweep says so
    trials = only_study(sweep_dir).get_trials()
    assert len(trials) == 2
    by_root = {t.params["data.root"]: t for t in trials}
    good, bad = by_root[str(imagefolder_session)], by_root[str(broken)]
    assert good.state == TrialState.COMPLETE
    assert good.value == pytest.approx(
        summary(sweep_dir / str(good.number))["metrics"]["val_accuracy"]
    )
    assert bad.state == TrialState.FAIL and "nan" in bad.user_attrs["failure"]
    record = summary(sweep_dir / str(bad.number))
    assert record["status"] == "failed" and "cannot identify image file" in record["error"]
    assert (sweep_dir / "optimization_results.yaml").exists()  # the best of what completed
