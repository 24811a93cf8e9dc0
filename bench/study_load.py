"""A pruned search's load on its study's storage at cluster shape, with tiny objectives: N
trial processes report intermediate values to one study at once (each through the reporter
a real trial's rank 0 uses: run/search_trial.py, found through the sweep directory's
.optuna_study.json) while the login process asks and tells, refilling each finished
trial's slot and telling quick trials of its own in between.

Used by tests/test_optuna_storage.py (a journal: nothing lost, nothing duplicated, no
process errors) and bench/optuna_storage.py (the same load on the journal and on SQLite).

    python -m bench.study_load worker RUN_DIR REPORTS      # one trial process (the load's)
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = "worker.json"  # in each worker trial's run directory
READY = "ready"  # in a worker trial's run directory once its trial is open
GO = "go"  # in the sweep directory: the first workers start reporting together
STUDY = "load"


@dataclass
class Load:
    storage: str  # a journal file, or a sqlite:/// URL
    workers: int = 8  # trial processes at once
    rounds: int = 2  # trials each worker slot runs in turn
    reports: int = 10  # intermediate values per worker trial
    login_trials: int = 40  # quick trials the login asks and tells itself, at least: it
    # goes on asking and telling them until the last worker trial has ended


@dataclass
class Outcome:
    seconds: float
    trials: int  # in the study
    expected: int  # worker trials + the login's own
    login_trials: int  # of the login's own
    numbers_ok: bool  # 0..n-1, each once
    lost_reports: int  # a worker reported a value the study does not hold
    extra_reports: int  # the study holds a value no worker reported
    unfinished: int  # trials not COMPLETE or PRUNED at the end
    pruned: int
    worker_failures: list[str] = field(default_factory=list)  # exit status / traceback
    retried_calls: int = 0  # storage calls tried again (study_storage.retrying's warnings)
    retry_errors: dict[str, int] = field(default_factory=dict)  # what they met, by kind
    unpruned_trials: int = 0  # trials whose storage failed for good (pruning_off)
    login_error: str | None = None

    @property
    def clean(self) -> bool:
        return (
            self.numbers_ok
            and self.trials == self.expected
            and not (self.lost_reports or self.extra_reports or self.unfinished)
            and not self.worker_failures
            and not self.unpruned_trials
            and self.login_error is None
        )


def run(load: Load, sweep_dir: Path) -> Outcome:
    """The load, start to end, in this process as the login; then what the study holds."""
    import optuna

    from experiments import study_storage
    from experiments.run.search_trial import build_pruner, write_spec

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    pruner = ("median", {"n_startup_trials": 2})
    write_spec(sweep_dir, load.storage, STUDY, *pruner)
    storage = study_storage.open_storage(study_storage.absolute(load.storage))
    study = optuna.create_study(
        study_name=STUDY,
        storage=storage,
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=build_pruner(*pruner),
    )
    started = time.monotonic()
    running: dict[int, subprocess.Popen] = {}
    finished: dict[int, tuple[int, str]] = {}
    to_start = load.workers * load.rounds
    login_done = 0
    login_error = None
    space = {"x": optuna.distributions.FloatDistribution(0, 1)}
    try:
        while to_start or running or login_done < load.login_trials:
            while to_start and len(running) < load.workers:
                trial = study.ask(space)
                running[trial.number] = _spawn(sweep_dir / str(trial.number), load.reports)
                to_start -= 1
            if not (sweep_dir / GO).exists() and all(
                (sweep_dir / str(n) / READY).exists() for n in running
            ):
                (sweep_dir / GO).touch()  # every first worker has its trial open: report
            trial = study.ask(space)  # a quick trial of the login's own: ask, tell
            study.tell(trial, trial.params["x"])
            login_done += 1
            for number, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                _, stderr = proc.communicate()
                finished[number] = (proc.returncode, stderr)
                del running[number]
                _tell_worker_trial(study, sweep_dir / str(number))
            time.sleep(0.01)
    except Exception as error:  # the login's own storage calls
        login_error = f"{type(error).__name__}: {error}"
        for proc in running.values():
            proc.kill()
    seconds = time.monotonic() - started
    failures = [
        f"trial {n}: exit {code}: {err.strip().splitlines()[-1] if err.strip() else ''}"
        for n, (code, err) in sorted(finished.items())
        if code != 0 or "Traceback" in err
    ]
    retries = [
        line
        for _, err in finished.values()
        for line in err.splitlines()
        if "trying again in" in line
    ]
    outcome = _outcome(
        study, sweep_dir, load, login_done, seconds, failures, len(retries), login_error
    )
    for line in retries:  # "storage S: W failed (Kind: message); trying again in T s"
        kind = line.rpartition(" failed (")[2].rpartition("); trying again")[0]
        outcome.retry_errors[kind] = outcome.retry_errors.get(kind, 0) + 1
    return outcome


def _spawn(run_dir: Path, reports: int) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    src = str(REPO / "src")
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")]), src])
    return subprocess.Popen(
        [sys.executable, "-m", "bench.study_load", "worker", str(run_dir), str(reports)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _tell_worker_trial(study: object, run_dir: Path) -> None:
    from optuna.trial import TrialState

    result = json.loads((run_dir / RESULT).read_text()) if (run_dir / RESULT).exists() else {}
    number = int(run_dir.name)
    if result.get("pruned"):
        study.tell(number, state=TrialState.PRUNED)
    elif result.get("values"):
        study.tell(number, result["values"][-1])
    else:
        study.tell(number, state=TrialState.FAIL)


def _outcome(
    study: object,
    sweep_dir: Path,
    load: Load,
    login_trials: int,
    seconds: float,
    failures: list[str],
    retried: int,
    login_error: str | None,
) -> Outcome:
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    lost = extra = unpruned = 0
    for trial in trials:
        result_path = sweep_dir / str(trial.number) / RESULT
        if not result_path.exists():
            extra += len(trial.intermediate_values)
            continue
        result = json.loads(result_path.read_text())
        reported = {step: value for step, value in enumerate(result["values"], start=1)}
        held = trial.intermediate_values
        lost += sum(1 for step in reported if step not in held)
        extra += sum(1 for step in held if step not in reported)
        unpruned += bool(result.get("off"))
    return Outcome(
        seconds=round(seconds, 2),
        trials=len(trials),
        expected=load.workers * load.rounds + login_trials,
        login_trials=login_trials,
        numbers_ok=numbers == list(range(len(numbers))),
        lost_reports=lost,
        extra_reports=extra,
        unfinished=sum(t.state not in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials),
        pruned=sum(t.state == TrialState.PRUNED for t in trials),
        worker_failures=failures,
        retried_calls=retried,
        unpruned_trials=unpruned,
        login_error=login_error,
    )


def worker(run_dir: Path, reports: int) -> None:
    """One trial's rank 0: its reporter, one value per evaluation, until the pruner stops it."""
    import logging

    from experiments.run.search_trial import TrialReporter

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    reporter = TrialReporter.for_run(run_dir)
    assert reporter is not None and reporter.trial is not None, "trial not opened"
    number = int(run_dir.name)
    (run_dir / READY).touch()
    while not (run_dir.parent / GO).exists():
        time.sleep(0.01)
    values: list[float] = []
    pruned = False
    for step in range(1, reports + 1):
        value = round(math.sin(number * 7.1 + step) * 0.5 + 0.5, 6)  # a curve per trial
        values.append(value)
        if reporter.report(value, step):
            pruned = True
            break
        time.sleep(0.01)
    result = {"values": values, "pruned": pruned, "off": reporter.off}
    (run_dir / RESULT).write_text(json.dumps(result), encoding="utf-8")


def as_dict(outcome: Outcome) -> dict:
    return {**asdict(outcome), "clean": outcome.clean}


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        raise SystemExit(__doc__)
