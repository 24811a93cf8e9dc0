"""An Optuna search that an interruption does not lose (conf/hydra/sweeper/optuna_resumable.yaml;
what it does for the user: docs/sweeps.md).

The stock hydra-optuna-sweeper keeps its study in memory by default, runs `n_trials` more trials
each start, numbers the job directories from 0 again (a re-run overwrites the earlier trials'
run directories) and aborts the search on the first failed trial (our failed points return
NaN). Here the study lives in the sweep directory, named after the command line; `n_trials` is
its total budget; a trial's run directory is its trial number; a failed run, or a Slurm job that
died (its end read on its own: launchers/slurm_jobs.py), is a FAIL trial (user attribute
`failure`) and the search goes on. Trials a killed search left RUNNING are FAIL (`interrupted`,
not counted against the budget), unless their run had completed: then they are told its recorded
value. A pruned trial (sweepers/pruning.py) counts against the budget. On Slurm, `n_jobs` trials
stay in flight: each trial that ends is told at once and its slot refilled with a new job, rather
than waiting for the whole batch (hydra issues 2257/3091).
"""

from __future__ import annotations

import functools
import logging
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_optuna_sweeper._impl import (
    OptunaSweeperImpl,
    create_params_from_overrides,
)
from omegaconf import OmegaConf
from optuna.trial import FrozenTrial, Trial, TrialState

from experiments.run.record import read_summary
from experiments.sweepers import pruning

log = logging.getLogger(__name__)

DEFAULT_STUDY_NAME = "search"
INTERRUPTED = "interrupted"  # user attribute of a trial whose search was killed while it ran
FAILURE = "failure"  # user attribute: why a trial's run failed


class ResumableOptunaSweeperImpl(OptunaSweeperImpl):
    def __init__(
        self, *args: Any, pruning: tuple[str, dict[str, Any]] = ("none", {}), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.pruning = pruning

    def sweep(self, arguments: list[str]) -> None:
        assert self.config is not None and self.launcher is not None
        self._process_searchspace_config()
        distributions, fixed = create_params_from_overrides(
            [*self._parse_sweeper_params_config(), *arguments]
        )
        for name in fixed:
            distributions.pop(name, None)
        self.is_grid = (
            isinstance(self.sampler, functools.partial)
            and self.sampler.func == optuna.samplers.GridSampler
        )
        if self.is_grid:
            grid = {name: self._to_grid_sampler_choices(d) for name, d in distributions.items()}
            self.sampler = self.sampler(grid)
            self.n_trials = min(self.n_trials, math.prod(len(v) for v in grid.values()))
        directions = self._get_directions()
        study = self._open_study(directions)
        self._hold_the_study()
        self._settle_interrupted(study, len(directions))
        earlier = study.get_trials(deepcopy=False)
        if earlier:
            # A seeded sampler would draw its first start-up points again, those of the trials
            # already in the study: continue from another random state.
            self.sampler.reseed_rng()
        done = sum(counts_against_budget(t) for t in earlier)
        to_go = max(self.n_trials - done, 0)
        log.info(
            f"Study {study.study_name!r} in {self.storage}: {done} of {self.n_trials} trials "
            f"done, {to_go} to go (sampler {type(self.sampler).__name__}, "
            f"directions {directions})"
        )
        pruning.write_spec(
            Path(self.config.hydra.sweep.dir),
            pruning.absolute_sqlite(self.storage),
            study.study_name,
            *self.pruning,
        )
        if to_go > 0 and self._on_slurm():
            self._keep_in_flight(study, distributions, fixed, to_go, len(directions))
            to_go = 0
        while to_go > 0:
            batch = [study.ask() for _ in range(min(self.n_jobs, to_go))]
            overrides = self._configure_trials(batch, distributions, fixed)
            for trial, ret in zip(batch, self._launch(batch, overrides), strict=True):
                self._tell(study, trial, ret, len(directions))
            to_go -= len(batch)
        self._save_results(study, len(directions))

    def _on_slurm(self) -> bool:
        from hydra_plugins.experiments_launchers.slurm import ExperimentsSlurmLauncher

        return isinstance(self.launcher, ExperimentsSlurmLauncher)

    def _keep_in_flight(
        self,
        study: optuna.Study,
        distributions: dict[str, Any],
        fixed: dict[str, Any],
        to_go: int,
        n_objectives: int,
    ) -> None:
        """n_jobs trials as Slurm jobs at all times: the first n_jobs as one job array, then
        each trial that ends is told at once and a new one submitted in its slot."""
        import time

        from experiments.launchers import slurm_jobs

        sweep_dir = Path(self.config.hydra.sweep.dir)
        running: list[tuple[Trial, Any, list[str]]] = []

        def submit(count: int) -> None:
            trials = [study.ask() for _ in range(count)]
            overrides = self._configure_trials(trials, distributions, fixed)
            jobs = _by_number(
                trials, overrides, lambda o, n: slurm_jobs.submit(self.launcher, self.config, o, n)
            )
            running.extend(zip(trials, jobs, map(list, overrides), strict=True))

        started = min(self.n_jobs, to_go)
        submit(started)
        to_go -= started
        while running:
            done = slurm_jobs.ended([job for _, job, _ in running])
            ended = [entry for entry, is_done in zip(running, done, strict=True) if is_done]
            if not ended:
                time.sleep(slurm_jobs.POLL_S)
                continue
            for entry in ended:
                trial, job, overrides = entry
                running.remove(entry)
                ret = slurm_jobs.outcome(job, overrides, sweep_dir / str(trial.number))
                self._tell(study, trial, ret, n_objectives)
                if to_go > 0:  # the slot is free: refill it now
                    submit(1)
                    to_go -= 1

    def _hold_the_study(self) -> None:
        """One search process per study: a second one (the same command in another shell)
        would mark the first one's running trials as interrupted. Refused in one line; the
        lock goes with the process, however it ends."""
        import fcntl
        import sys

        storage = self.storage
        if not (isinstance(storage, str) and storage.startswith("sqlite:///")):
            return
        lock = Path(storage.removeprefix("sqlite:///")).with_suffix(".lock")
        self._lock = open(lock, "w")  # noqa: SIM115 (held until the process ends)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(
                f"error: another search is running this study ({lock}); wait for it to end, "
                "or run the search in another directory (hydra.sweep.dir=...)",
                file=sys.stderr,
            )
            sys.exit(2)

    def _open_study(self, directions: list[str]) -> optuna.Study:
        storage = self.storage
        if isinstance(storage, str) and storage.startswith("sqlite:///"):
            # Created here, not earlier: a dry run (callbacks.on_multirun_start) never gets here.
            Path(storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            init_sqlite_storage(storage)
        return optuna.create_study(
            study_name=self.study_name or (DEFAULT_STUDY_NAME if storage else None),
            storage=storage,
            sampler=self.sampler,
            pruner=pruning.build(*self.pruning),
            directions=directions,
            load_if_exists=True,
        )

    def _launch(self, batch: list[Trial], overrides: list[Any]) -> list[JobReturn]:
        return _by_number(batch, overrides, lambda o, n: self.launcher.launch(o, initial_job_idx=n))

    def _settle_interrupted(self, study: optuna.Study, n_objectives: int) -> None:
        """Trials still RUNNING when the search starts belong to a search that was killed."""
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            run_dir = Path(self.config.hydra.sweep.dir) / str(trial.number)
            values = _recorded_values(run_dir)
            if (read_summary(run_dir) or {}).get("status") == "pruned":
                log.info(f"Trial {trial.number} had been pruned before the interruption")
                self._tell_state(study, trial.number, TrialState.PRUNED)
            elif values is not None and len(values) == n_objectives:
                log.info(f"Trial {trial.number} had completed before the interruption: {values}")
                self._tell_state(study, trial.number, TrialState.COMPLETE, values)
            else:
                log.info(f"Trial {trial.number} was interrupted: marked failed")
                study._storage.set_trial_user_attr(trial._trial_id, INTERRUPTED, True)
                if "grid_id" in trial.system_attrs:
                    # GridSampler counts a finished trial's grid point as visited: this one
                    # was not, and is to be drawn again.
                    study._storage.set_trial_system_attr(trial._trial_id, "grid_id", None)
                self._tell_state(study, trial.number, TrialState.FAIL)

    def _tell(self, study: optuna.Study, trial: Trial, ret: JobReturn, n_objectives: int) -> None:
        """COMPLETE with the run's value(s); FAIL when the run failed. Optuna 2.10 refuses a
        NaN value (tell raises and leaves the trial RUNNING), and the stock plugin then aborts
        the search: a failed sweep point returns NaN (train.py), so it is a FAIL here. A run
        the pruner stopped is recorded `pruned` in its summary.json: PRUNED here."""
        summary = read_summary(Path(self.config.hydra.sweep.dir) / str(trial.number)) or {}
        if summary.get("status") == "pruned":
            log.info(f"Trial {trial.number} pruned: {summary.get('pruned')}")
            self._tell_state(study, trial.number, TrialState.PRUNED)
            return
        try:
            returned = ret.return_value  # raises the job's exception when the job failed
            values = [float(v) for v in (returned if n_objectives > 1 else [returned])]
            if len(values) != n_objectives or not all(map(math.isfinite, values)):
                raise ValueError(f"the run returned {returned!r}")
        except Exception as error:
            log.warning(f"Trial {trial.number} failed: {error}")
            trial.set_user_attr(FAILURE, f"{type(error).__name__}: {error}")
            self._tell_state(study, trial.number, TrialState.FAIL)
            return
        self._tell_state(study, trial.number, TrialState.COMPLETE, values)

    def _tell_state(
        self, study: optuna.Study, number: int, state: TrialState, values: Any = None
    ) -> None:
        try:
            study.tell(number, state=state, values=values)
        except RuntimeError as error:
            # GridSampler calls study.stop() once the grid is covered, which raises outside
            # study.optimize; the trial's state is stored before that.
            if not (self.is_grid and "Study.stop" in str(error)):
                raise

    def _save_results(self, study: optuna.Study, n_objectives: int) -> None:
        if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            log.warning("No trial completed: no best parameters to report")
            return
        if n_objectives == 1:
            best = study.best_trial
            results = {"name": "optuna", "best_params": best.params, "best_value": best.value}
            log.info(f"Best parameters: {best.params}")
            log.info(f"Best value: {best.value}")
        else:
            front = [{"params": t.params, "values": t.values} for t in study.best_trials]
            results = {"name": "optuna", "solutions": front}
            log.info(f"Number of Pareto solutions: {len(front)}")
        OmegaConf.save(
            OmegaConf.create(results),
            Path(self.config.hydra.sweep.dir, "optimization_results.yaml"),
        )


def init_sqlite_storage(url: str) -> None:
    """Create the storage's tables and stamp its schema version, once. Optuna 2.10 stamps
    the version on a connection it never commits: with SQLAlchemy 2 the stamp is rolled back
    and every later open fails (AssertionError in get_current_version). An autocommit engine
    keeps it; the study itself then uses ordinary transactions."""
    from optuna.storages import RDBStorage

    logging.getLogger("alembic").setLevel(logging.WARNING)  # its INFO lines at every open
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # optuna 2.10 on SQLAlchemy 2
        RDBStorage(url, engine_kwargs={"isolation_level": "AUTOCOMMIT"}).engine.dispose()


def counts_against_budget(trial: FrozenTrial) -> bool:
    """Finished trials count against n_trials, except those an interruption failed."""
    return trial.state.is_finished() and not trial.user_attrs.get(INTERRUPTED)


def _by_number(trials: list[Trial], overrides: list[Any], launch: Callable[..., Any]) -> list[Any]:
    """Each trial runs in the run directory named after its number: `launch(overrides, first
    number)` once for a batch this process asked (consecutive numbers), else once per trial
    (another process asks from the same study)."""
    first = trials[0].number
    if [t.number for t in trials] == list(range(first, first + len(trials))):
        return list(launch(overrides, first))
    return [launch([o], t.number)[0] for t, o in zip(trials, overrides, strict=True)]


def _recorded_values(run_dir: Path) -> list[float] | None:
    """The objective a completed run recorded in its summary.json (what it returned)."""
    summary = read_summary(run_dir)
    if not summary or summary.get("status") != "completed":
        return None
    from experiments.families import for_summary

    names = summary.get("objective") or [for_summary(summary).objective]
    values = [summary.get("metrics", {}).get(name) for name in names]
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
        return None
    return [float(v) for v in values]
