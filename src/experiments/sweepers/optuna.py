"""An Optuna search that an interruption does not lose (conf/hydra/sweeper/optuna_resumable.yaml;
what it does for the user: docs/sweeps.md).

Our own Hydra sweeper on Optuna's current API, in place of hydra-optuna-sweeper (pinned to
Optuna < 3): the same config keys and command lines, the loop below. The study lives in the
sweep directory (a journal file, safe on a cluster's shared filesystem: study_storage.py),
named after the command line; `n_trials` is its total budget; a trial's run directory is its
trial number; a failed run, or a Slurm job that died (its end read on its own:
launchers/slurm_jobs.py), is a FAIL trial (user attribute `failure`) and the search goes on.
Trials a killed search left RUNNING are FAIL (`interrupted`, not counted against the budget),
unless their run had completed: then they are told its recorded value. A pruned trial
(run/search_trial.py) counts against the budget. On Slurm, `n_jobs` trials stay in flight:
each trial that ends is told at once and its slot refilled with a new job, rather than
waiting for the whole batch (hydra issues 2257/3091). A search whose `optuna.db` Optuna 2.10
wrote continues in a journal (sweepers/migration.py). A storage that stays unreachable stops
the search in one line, after its running trials have ended and recorded themselves; the
same command then continues it.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import optuna
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf
from optuna.trial import FrozenTrial, Trial, TrialState

from experiments import study_storage
from experiments.composition import plain
from experiments.errors import ConfigError
from experiments.run import search_trial
from experiments.run.record import read_summary
from experiments.study_storage import StorageUnavailable
from experiments.sweepers import migration, pruning, samplers, search_space

log = logging.getLogger(__name__)

DEFAULT_STUDY_NAME = "search"
INTERRUPTED = "interrupted"  # user attribute of a trial whose search was killed while it ran
FAILURE = "failure"  # user attribute: why a trial's run failed
PRUNING_OFF = "pruning_off"  # user attribute: a trial whose storage failed ran on unpruned


class ResumableOptunaSweeperImpl:
    """The search. Its settings are checked when it is made (ConfigError: one line, exit 2,
    before anything is written); `setup` and `sweep` are Hydra's Sweeper calls."""

    def __init__(
        self,
        sampler: Any,
        direction: Any,
        storage: Any,
        study_name: str | None,
        n_trials: int,
        n_jobs: int,
        params: Any = None,
        custom_search_space: str | None = None,
        pruner: Any = "none",
        pruner_kwargs: Any = None,
    ) -> None:
        self.sampler_config = plain(sampler) if sampler is not None else {}
        self.directions = _directions(direction)
        self.storage = study_storage.check(storage)
        self.study_name = study_name
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.params = plain(params) or {}
        self.custom_search_space = custom_search_space
        self.sampler_name = samplers.check(self.sampler_config, len(self.directions))
        self.is_grid = self.sampler_name == "grid"
        self.pruning = pruning.check(pruner, plain(pruner_kwargs))
        if self.pruning[0] != "none" and not self.storage:
            raise ConfigError(
                "hydra.sweeper.pruner",
                self.pruning[0],
                "none with storage=null: trials report to the study's storage",
            )
        self.sampler: Any = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    # ------------------------------------------------------------------ the search

    def sweep(self, arguments: list[str]) -> None:
        assert self.config is not None and self.launcher is not None
        distributions, fixed = self._search_space(arguments)
        self._hold_the_study()
        try:
            study = self._open_study(self.directions)
            self._run(study, distributions, fixed)
        except migration.OldSchema as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)
        except StorageUnavailable as error:
            print(
                f"error: {error}; the search stopped (its running trials ended and are recorded "
                "in their run directories); the same command continues it",
                file=sys.stderr,
            )
            sys.exit(1)

    def _search_space(self, arguments: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
        """The searched and fixed parameters, and the sampler built for them (a grid over
        the searched ones): refused in one line before anything is written."""
        params = [f"{key}={value}" for key, value in self.params.items()]
        distributions, fixed = search_space.from_overrides([*params, *arguments])
        grid = None
        if self.is_grid:
            try:
                grid = {n: search_space.grid_choices(n, d) for n, d in distributions.items()}
            except ConfigError as error:
                _refuse(error)
            self.n_trials = min(self.n_trials, math.prod(len(v) for v in grid.values()))
        try:
            self.sampler = samplers.build(self.sampler_config, grid)
        except (TypeError, ValueError) as error:
            _refuse(ConfigError("hydra/sweeper/sampler", self.sampler_name, str(error)))
        return distributions, fixed

    def _run(self, study: optuna.Study, distributions: dict, fixed: dict) -> None:
        n_objectives = len(self.directions)
        self._settle_interrupted(study, n_objectives)
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
            f"directions {self.directions})"
        )
        self._write_spec(study)
        if to_go > 0 and self._on_slurm():
            self._keep_in_flight(study, distributions, fixed, to_go, n_objectives)
            to_go = 0
        while to_go > 0:
            batch = [self._ask(study) for _ in range(min(self.n_jobs, to_go))]
            overrides = self._configure_trials(batch, distributions, fixed)
            for trial, ret in zip(batch, self._launch(batch, overrides), strict=True):
                self._tell(study, trial, ret, n_objectives)
            to_go -= len(batch)
        self._save_results(study, n_objectives)

    def _write_spec(self, study: optuna.Study) -> None:
        """Where the study is, for the trials (a pruned search), the report and the
        dashboard."""
        sweep_dir = Path(self.config.hydra.sweep.dir)
        search_trial.write_spec(sweep_dir, self.storage, study.study_name, *self.pruning)

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
        each trial that ends is told at once and a new one submitted in its slot. A storage
        that stays unreachable stops the refills; the jobs still running are waited for (they
        record themselves) before the search says so."""
        from experiments.launchers import slurm_jobs

        sweep_dir = Path(self.config.hydra.sweep.dir)
        running: list[tuple[Trial, Any, list[str]]] = []
        failure: StorageUnavailable | None = None

        def submit(count: int) -> None:
            trials = [self._ask(study) for _ in range(count)]
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
                if failure is not None:
                    continue  # recorded in its run directory: the next search settles it
                try:
                    self._tell(study, trial, ret, n_objectives)
                    if to_go > 0:  # the slot is free: refill it now
                        submit(1)
                        to_go -= 1
                except StorageUnavailable as error:
                    failure = error
                    log.error(
                        f"{error}: no new trials; waiting for the {len(running)} running "
                        "trial(s) to end"
                    )
        if failure is not None:
            raise failure

    def _hold_the_study(self) -> None:
        """One search process per study file: a second one (the same storage from another
        sweep directory) would mark the first one's running trials as interrupted. Refused
        in one line; the lock goes with the process, however it ends. (The sweep directory's
        own lock, run/lock.py, refuses the same command first.)"""
        import fcntl

        path = study_storage.file_of(self.storage)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.with_suffix(".lock")
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
        """The study, created or loaded (an Optuna 2.10 database migrated first)."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = None
        if self.storage:
            notice = migration.prepare(self.storage)
            if notice:
                log.warning(notice)
            storage = study_storage.retrying(
                "opening it", lambda: study_storage.open_storage(self.storage), self.storage
            )

        def create() -> optuna.Study:
            return optuna.create_study(
                study_name=self.study_name or (DEFAULT_STUDY_NAME if storage else None),
                storage=storage,
                sampler=self.sampler,
                pruner=search_trial.build_pruner(*self.pruning),
                directions=directions,
                load_if_exists=True,
            )

        return study_storage.retrying("opening the study", create, self.storage)

    def _ask(self, study: optuna.Study) -> Trial:
        return study_storage.retrying("asking for a trial", study.ask, self.storage)

    def _configure_trials(
        self, trials: list[Trial], distributions: dict[str, Any], fixed: dict[str, Any]
    ) -> list[tuple[str, ...]]:
        """Each trial's overrides: its drawn parameters (and the custom search space's), then
        the fixed ones, which the trial also carries as user attributes."""
        extend = None
        if self.custom_search_space:
            from hydra.utils import get_method

            extend = get_method(self.custom_search_space)
        overrides = []
        for trial in trials:

            def draw(trial: Trial = trial) -> None:
                for name, distribution in distributions.items():
                    trial._suggest(name, distribution)
                for name, value in fixed.items():
                    trial.set_user_attr(name, value)
                if extend is not None:
                    extend(self.config, trial)

            study_storage.retrying(f"drawing trial {trial.number}", draw, self.storage)
            overlap = trial.params.keys() & fixed.keys()
            if overlap:
                raise ValueError(f"parameters both searched and fixed: {sorted(overlap)}")
            values = {**trial.params, **fixed}
            overrides.append(tuple(f"{name}={value}" for name, value in values.items()))
        return overrides

    def _launch(self, batch: list[Trial], overrides: list[Any]) -> list[JobReturn]:
        return _by_number(batch, overrides, lambda o, n: self.launcher.launch(o, initial_job_idx=n))

    def _settle_interrupted(self, study: optuna.Study, n_objectives: int) -> None:
        """Trials still RUNNING when the search starts belong to a search that was killed."""
        running = study_storage.retrying(
            "reading its trials",
            lambda: study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)),
            self.storage,
        )
        for trial in running:
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

                def mark(trial: FrozenTrial = trial) -> None:
                    study._storage.set_trial_user_attr(trial._trial_id, INTERRUPTED, True)
                    if "grid_id" in trial.system_attrs:
                        # GridSampler counts a finished trial's grid point as visited: this
                        # one was not, and is to be drawn again.
                        study._storage.set_trial_system_attr(trial._trial_id, "grid_id", None)

                study_storage.retrying(f"marking trial {trial.number}", mark, self.storage)
                self._tell_state(study, trial.number, TrialState.FAIL)

    def _tell(self, study: optuna.Study, trial: Trial, ret: JobReturn, n_objectives: int) -> None:
        """COMPLETE with the run's value(s); FAIL when the run failed (a failed sweep point
        returns NaN: train.py). A run the pruner stopped is recorded `pruned` in its
        summary.json: PRUNED here. A trial that ran unpruned because its storage failed
        carries why (user attribute `pruning_off`)."""
        summary = read_summary(Path(self.config.hydra.sweep.dir) / str(trial.number)) or {}
        if summary.get(PRUNING_OFF):
            log.warning(f"Trial {trial.number} ran unpruned {summary[PRUNING_OFF]}")
            self._set_user_attr(trial, PRUNING_OFF, summary[PRUNING_OFF])
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
            self._set_user_attr(trial, FAILURE, f"{type(error).__name__}: {error}")
            self._tell_state(study, trial.number, TrialState.FAIL)
            return
        self._tell_state(study, trial.number, TrialState.COMPLETE, values)

    def _set_user_attr(self, trial: Trial, key: str, value: Any) -> None:
        study_storage.retrying(
            f"noting trial {trial.number}'s {key}",
            lambda: trial.set_user_attr(key, value),
            self.storage,
        )

    def _tell_state(
        self, study: optuna.Study, number: int, state: TrialState, values: Any = None
    ) -> None:
        def tell() -> None:
            try:
                # skip_if_finished: a try again after a tell that was stored
                study.tell(number, state=state, values=values, skip_if_finished=True)
            except RuntimeError as error:
                # GridSampler calls study.stop() once the grid is covered, which raises
                # outside study.optimize; the trial's state is stored before that.
                if not (self.is_grid and "Study.stop" in str(error)):
                    raise

        study_storage.retrying(f"telling trial {number} {state.name}", tell, self.storage)

    def _save_results(self, study: optuna.Study, n_objectives: int) -> None:
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not completed:
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


def _refuse(error: ConfigError) -> NoReturn:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(ConfigError.exit_code)


def _directions(direction: Any) -> list[str]:
    given = plain(direction) if OmegaConf.is_config(direction) else direction
    names = given if isinstance(given, list) else [given]
    return [str(getattr(d, "name", d)) for d in names]


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
