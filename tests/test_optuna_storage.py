"""Searches on current Optuna (issue 59): the study in a journal file that trials open at once
from many processes, an Optuna 2.10 search continued, storage failures said in one line and
never silent, the samplers stated and checked before a search starts, Wilcoxon's pruner."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import shutil
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from bench.study_load import Load, as_dict
from bench.study_load import run as run_load
from experiments import study_storage
from experiments.run.early_stopping import Monitor
from experiments.run.search_trial import SPEC, TrialReporter, write_spec
from experiments.sweepers import migration
from experiments.sweepers.optuna import INTERRUPTED, ResumableOptunaSweeperImpl

from .conftest import REPO, TINY_POINT, run_cli, run_cli_in_process
from .support.studies import only_study

FIXTURE = Path(__file__).parent / "data" / "optuna_2_10_search"
SAMPLERS = REPO / "conf" / "hydra" / "sweeper" / "sampler"


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A storage's tries as the search makes them, only closer together (3 tries, 10 ms then
    20 ms apart, instead of 6 over 15.5 s)."""
    monkeypatch.setattr(study_storage, "ATTEMPTS", 3)
    monkeypatch.setattr(study_storage, "FIRST_WAIT_S", 0.01)


# ---------------------------------------------------------------- cluster shape


@pytest.mark.slow
def test_eight_trials_report_to_one_journal_while_the_login_asks_and_tells(
    tmp_path: Path,
) -> None:
    """8 trial processes, each through a real trial's reporter (the sweep directory's
    .optuna_study.json, its journal and its NFS-safe lock), report 5 values each, released
    together once all have their trial open, while the login asks for and tells a quick
    trial of its own every 10 ms and tells each worker's trial as it ends."""
    outcome = run_load(
        Load(storage=str(tmp_path / "optuna.journal"), workers=8, rounds=1, reports=5),
        tmp_path,
    )
    result = as_dict(outcome)
    assert outcome.worker_failures == [], result
    assert outcome.login_error is None, result
    assert outcome.numbers_ok and outcome.trials == outcome.expected, result  # none lost or twice
    assert outcome.login_trials >= 40, result  # the login kept asking while the workers ran
    assert (outcome.lost_reports, outcome.extra_reports, outcome.unfinished) == (0, 0, 0), result
    assert (outcome.retried_calls, outcome.unpruned_trials) == (0, 0), result
    assert outcome.clean
    # what every one of them opened: the journal with the lock that works on NFS
    from optuna.storages.journal import JournalFileOpenLock

    opened = study_storage.open_storage(str(tmp_path / "optuna.journal"))
    assert isinstance(opened._backend._lock, JournalFileOpenLock)
    workers = [p for p in tmp_path.iterdir() if (p / "worker.json").exists()]
    assert len(workers) == 8
    study = only_study(tmp_path)  # what the search's own .optuna_study.json names
    for run_dir in workers:
        reported = json.loads((run_dir / "worker.json").read_text())["values"]
        trial = study.trials[int(run_dir.name)]
        assert trial.intermediate_values == dict(enumerate(reported, start=1)), run_dir.name


# ---------------------------------------------------------------- an Optuna 2.10 search

# The fixture's search (tests/data/optuna_2_10_search/make_fixture.py: ARGUMENTS), continued
# with its own command and a budget of one more trial than it had finished.
OLD_SEARCH = [
    "hparams_search=digits_lr",
    *TINY_POINT,
    "trainer.epochs=2",
    "hydra.sweeper.pruner=median",
    "+hydra.sweeper.pruner_kwargs.n_startup_trials=1",
    "hydra.sweeper.n_trials=6",
]
# What Optuna 2.10 stored: number -> (state, value, intermediate values)
OLD_TRIALS = {
    0: (TrialState.COMPLETE, 0.5, {1: 0.25, 2: 0.5}),
    1: (TrialState.COMPLETE, 0.5625, {1: 0.375, 2: 0.5625}),
    2: (TrialState.PRUNED, None, {1: -math.inf}),
    3: (TrialState.FAIL, None, {}),
    4: (TrialState.COMPLETE, 0.625, {1: 0.3125, 2: 0.625}),
}
OLD_LRS = [
    0.0005835496346821347,
    0.03079180048983015,
    0.0056352210429878305,
    0.13849507661133068,
    0.13179630432958683,
    0.6376587480497298,
]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_search_optuna_2_10_left_continues_in_a_journal(tmp_path: Path) -> None:
    """The search's own command again: its optuna.db is copied into optuna.journal (one line
    says so; the database is left as it was), every trial is there as 2.10 stored it, the
    trial the kill left running is failed as interrupted, and exactly one new trial runs, as
    number 6, reporting to the journal: a tiny run's first val_accuracy (below 0.2) is below
    the median of the 2.10 trials' first evaluations (0.3125), so the pruner, reading those,
    stops it there."""
    sweep_dir = tmp_path / "sweep"
    shutil.copytree(FIXTURE / "sweep", sweep_dir)
    database = _digest(sweep_dir / "optuna.db")
    records = {n: (sweep_dir / str(n) / "summary.json").read_text() for n in range(6)}
    result = run_cli([*OLD_SEARCH, f"hydra.sweep.dir={sweep_dir}"], cwd=tmp_path)
    # 1: the sweep's outcome counts the old search's failed point 3 (its report says so)
    assert result.returncode == 1, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "FAILED point 3: RuntimeError: a stand-in for the run's crash" in result.stdout
    notice = (
        f"Migrated study 'digits_lr' (6 trials) from {sweep_dir / 'optuna.db'} (Optuna "
        f"2.10.1's SQLite) into {sweep_dir / 'optuna.journal'}; optuna.db is left as it was "
        "and no longer read"
    )
    assert output.count(notice) == 1, output[-3000:]
    assert "5 of 6 trials done, 1 to go" in output
    assert _digest(sweep_dir / "optuna.db") == database
    study = only_study(sweep_dir)
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(7))
    for number, (state, value, intermediate) in OLD_TRIALS.items():
        trial = trials[number]
        assert (trial.state, trial.value, trial.intermediate_values) == (state, value, intermediate)
        assert trial.params == {"optimizer.lr": OLD_LRS[number]}
        assert trial.distributions["optimizer.lr"] == optuna.distributions.FloatDistribution(
            1e-4, 1.0, log=True
        )
        assert trial.user_attrs["data"] == "synthetic"  # the search's fixed overrides
    assert trials[3].user_attrs["failure"] == "ValueError: the run returned nan"
    interrupted = trials[5]
    assert (interrupted.state, interrupted.user_attrs[INTERRUPTED]) == (TrialState.FAIL, True)
    assert interrupted.intermediate_values == {1: 0.375}
    new = trials[6]
    record = json.loads((sweep_dir / "6" / "summary.json").read_text())
    assert new.state == TrialState.PRUNED and record["status"] == "pruned"
    assert record["pruned"]["step"] == 1 and record["pruned"]["trial"] == 6
    first = json.loads((sweep_dir / "6" / "metrics.jsonl").read_text().splitlines()[0])
    assert new.intermediate_values == {1: pytest.approx(first["val_accuracy"])}  # the journal's
    assert first["val_accuracy"] < 0.3125
    assert new.params["optimizer.lr"] not in OLD_LRS
    for number, text in records.items():  # no old trial ran again
        assert (sweep_dir / str(number) / "summary.json").read_text() == text, number
    spec = json.loads((sweep_dir / SPEC).read_text())
    assert spec["storage"] == str(sweep_dir / "optuna.journal")
    assert not (sweep_dir / ".optuna_pruning.json").exists()  # 2.10's, replaced


def test_an_old_sqlite_storage_named_on_the_command_line_is_upgraded_with_a_notice(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    shutil.copyfile(FIXTURE / "sweep" / "optuna.db", path)
    url = f"sqlite:///{path}"
    with pytest.raises(RuntimeError, match="optuna storage upgrade"):
        optuna.storages.RDBStorage(url)  # what Optuna 5 says of it by itself
    notice = migration.prepare(url)
    assert notice == (
        f"Upgraded {path} from Optuna schema v2.6.0.a to v3.2.0.a for Optuna "
        f"{optuna.__version__}; the upgrade is one-way: Optuna 2.10 cannot open it any more"
    )
    study = optuna.load_study(study_name="digits_lr", storage=url)
    assert [t.state for t in study.trials] == [
        *(OLD_TRIALS[n][0] for n in range(5)),
        TrialState.RUNNING,
    ]
    assert migration.prepare(url) is None  # once
    assert migration.prepare(f"sqlite:///{tmp_path / 'new.db'}") is None  # nothing to upgrade


# ---------------------------------------------------------------- storage failures


def _sweep_with_a_broken_journal(tmp_path: Path) -> Path:
    """A pruned search's sweep directory whose journal cannot be opened (a directory stands
    where the file should be: every open fails with an OSError, as an unreachable mount)."""
    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "optuna.journal").mkdir(parents=True)
    write_spec(sweep_dir, str(sweep_dir / "optuna.journal"), "search", "median", {})
    (sweep_dir / "0").mkdir()
    return sweep_dir


def test_a_trial_whose_storage_fails_runs_on_unpruned_and_says_so(
    tmp_path: Path, quick_retries: None, caplog: pytest.LogCaptureFixture
) -> None:
    sweep_dir = _sweep_with_a_broken_journal(tmp_path)
    reporter = TrialReporter.for_run(sweep_dir / "0")
    assert reporter is not None and reporter.trial is None
    summary: dict = {}
    monitor = Monitor(None, "val_accuracy", summary, reporter)
    verdict = monitor.after_evaluation(10, 1, {"val_accuracy": 0.5, "train_loss": 1.0})
    assert not verdict.stop  # the run goes on
    why = (
        f"from evaluation 1 on (reports stopped): the study's storage "
        f"{sweep_dir / 'optuna.journal'} failed 3 times while trial 0 opened its study "
        f"(IsADirectoryError: [Errno 21] Is a directory: '{sweep_dir / 'optuna.journal'}')"
    )
    assert summary["pruning_off"] == why  # in the run's summary.json
    assert f"trial 0 runs unpruned {why}" in caplog.text  # and in its log, one line
    assert caplog.text.count("trying again in") == 2  # tried 3 times, with backoff


def test_the_login_reports_a_failing_storage_in_one_line(
    tmp_path: Path, quick_retries: None, capsys: pytest.CaptureFixture
) -> None:
    """The search's storage fails every try: one line on stderr naming the storage, what the
    search was doing and the error, and exit 1 (no traceback)."""
    sweep_dir = _sweep_with_a_broken_journal(tmp_path)
    sweeper = ResumableOptunaSweeperImpl(
        sampler={"_target_": "optuna.samplers.RandomSampler"},
        direction="maximize",
        storage=str(sweep_dir / "optuna.journal"),
        study_name=None,
        n_trials=3,
        n_jobs=1,
        params={"optimizer.lr": "interval(0.001, 0.1)"},
    )
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    sweeper.launcher = object()  # never reached: the study does not open
    with pytest.raises(SystemExit) as exited:
        sweeper.sweep([])
    assert exited.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"error: the study's storage {sweep_dir / 'optuna.journal'} failed 3 times while "
        f"opening it (IsADirectoryError: [Errno 21] Is a directory: "
        f"'{sweep_dir / 'optuna.journal'}'); the search stopped (its running trials ended and "
        "are recorded in their run directories); the same command continues it"
    )


# ---------------------------------------------------------------- samplers and pruners

# Arguments a sampler's config leaves out, and why (every other one is stated).
LEFT_OUT = {
    "tpe": {
        "consider_prior",
        "prior_weight",
        "consider_magic_clip",
        "consider_endpoints",
        "gamma",
        "weights",
        "warn_independent_sampling",
        "constraints_func",
    },  # deprecated
    "grid": {"search_space"},  # the search's params
    "cmaes": {
        "x0",
        "sigma0",
        "restart_strategy",
        "inc_popsize",  # deprecated
        "source_trials",
    },  # trials of another study
    "nsgaii": {"constraints_func"},  # deprecated
    "nsgaiii": {"constraints_func"},  # deprecated
    "gp": {"constraints_func"},  # deprecated
    "random": set(),
}


def test_each_sampler_option_states_every_argument_at_the_installed_default() -> None:
    from hydra.utils import get_class

    assert sorted(p.stem for p in SAMPLERS.glob("*.yaml")) == sorted(LEFT_OUT)
    for name, left_out in LEFT_OUT.items():
        config = OmegaConf.to_container(OmegaConf.load(SAMPLERS / f"{name}.yaml"))
        parameters = inspect.signature(get_class(config.pop("_target_")).__init__).parameters
        arguments = {k: p.default for k, p in parameters.items() if k != "self"}
        assert set(config) == set(arguments) - left_out, name
        assert config == {key: arguments[key] for key in config}, name


SEARCH = [
    "-m",
    "hydra/sweeper=optuna_resumable",
    "hydra.sweeper.direction=maximize",
    *TINY_POINT,
    "optimizer.lr=tag(log, interval(1e-5, 1e-2))",
]


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["hydra.sweeper.sampler._target_=optuna.samplers.MOTPESampler"],
            "error: invalid config: hydra.sweeper.sampler._target_="
            f"'optuna.samplers.MOTPESampler': not in the installed Optuna {optuna.__version__}: "
            "one of hydra/sweeper/sampler=tpe, hydra/sweeper/sampler=random, "
            "hydra/sweeper/sampler=grid, hydra/sweeper/sampler=cmaes, "
            "hydra/sweeper/sampler=nsgaii, hydra/sweeper/sampler=nsgaiii, "
            "hydra/sweeper/sampler=gp",
        ),
        (
            ["+hydra.sweeper.sampler.n_startup_trial=2"],
            "error: invalid config: hydra.sweeper.sampler.n_startup_trial=2: did you mean "
            "hydra.sweeper.sampler.n_startup_trials?",
        ),
        (
            [
                "hydra/sweeper/sampler=cmaes",
                "objective=[val_accuracy,energy_per_image_mj]",
                "hydra.sweeper.direction=[maximize,minimize]",
            ],
            "error: invalid config: hydra/sweeper/sampler='cmaes': tpe, nsgaii, nsgaiii, gp or "
            "random: Optuna's CmaEsSampler searches one objective and this study has 2",
        ),
        (
            ["hydra/sweeper/sampler=grid"],
            "error: invalid config: optimizer.lr='tag(log, interval(1e-05, 0.01))': an interval "
            "has no grid points; use choice(...) or range(...) with hydra/sweeper/sampler=grid",
        ),
    ],
    ids=["lacking", "misspelt", "one-objective", "grid-of-an-interval"],
)
def test_a_sampler_that_cannot_run_is_refused_before_the_search(
    tmp_path: Path, overrides: list[str], line: str
) -> None:
    sweep_dir = tmp_path / "search"
    result = run_cli_in_process(
        [*SEARCH, *overrides, f"hydra.sweep.dir={sweep_dir}"],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [line]
    # nothing of the search was written (the sweep directory's launch lock is run/lock.py's)
    assert [p.name for p in sweep_dir.iterdir()] in ([], [".sweep.lock"])


def test_wilcoxons_pruner_stops_a_trial_worse_than_the_best_at_the_same_steps(
    tmp_path: Path,
) -> None:
    """hydra.sweeper.pruner=wilcoxon, through the reporter a trial's rank 0 uses: paired over
    the steps both reported, a trial plainly below the best one is stopped."""
    journal = str(tmp_path / "optuna.journal")
    write_spec(tmp_path, journal, "search", "wilcoxon", {"p_threshold": 0.1})
    study = optuna.create_study(
        study_name="search", storage=study_storage.open_storage(journal), direction="maximize"
    )
    best = study.ask()
    for step in range(1, 11):
        best.report(0.8 + step / 100, step)
    study.tell(best, 0.9)
    worse = study.ask()
    (tmp_path / str(worse.number)).mkdir()
    reporter = TrialReporter.for_run(tmp_path / str(worse.number))
    stopped = None
    for step in range(1, 11):
        if reporter.report(0.5 + step / 100, step):
            stopped = step
            break
    assert stopped is not None and 2 < stopped < 10, stopped  # after its start-up steps
    assert study.trials[1].intermediate_values == {s: 0.5 + s / 100 for s in range(1, stopped + 1)}


def test_sqlite_with_a_pruner_on_slurm_gets_a_warning_line(tmp_path: Path) -> None:
    result = run_cli_in_process(
        [
            "hparams_search=digits_lr",
            *TINY_POINT,
            "launcher=slurm",
            "hydra.sweeper.storage=sqlite:///search/optuna.db",
            "hydra.sweeper.pruner=median",
            "dry_run=true",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line.strip() for line in result.stdout.splitlines() if "hydra.sweeper.storage" in line]
    assert lines == [
        "warning: hydra.sweeper.storage=sqlite:///search/optuna.db: each pruned trial's Slurm "
        "job writes this SQLite file from its node, and SQLite's locks are unreliable on a "
        'shared (NFS) filesystem ("database is locked", or a damaged study); the default '
        "journal file (${hydra.sweep.dir}/optuna.journal) is safe there"
    ]
