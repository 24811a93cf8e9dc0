"""Pruning for `hydra/sweeper=optuna_resumable` (`hydra.sweeper.pruner=median|hyperband|none`,
docs/sweeps.md#pruning): a trial that is plainly worse than the others after an evaluation
stops there, recorded `pruned`.

hydra-optuna-sweeper has no pruning: its trials are whole runs in other processes (local
children, torchrun ranks, Slurm jobs), which never see the study. Here the search writes
`<sweep dir>/.optuna_pruning.json` (storage URL, study, pruner and its settings) before it
launches a trial; a trial's run directory is `<sweep dir>/<trial number>`, so each run finds
its trial without any extra override. After each evaluation the run's rank 0 reports its
objective to the study's SQLite storage (`trial.report`) and asks the pruner
(`trial.should_prune`); a pruned run ends at once (run/early_stopping.py raises Pruned,
train.py records `pruned`), and the search marks the trial PRUNED and goes on.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import warnings
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.known_keys import nearest
from experiments.run.record import atomically
from experiments.validation import choice

log = logging.getLogger(__name__)

SPEC = ".optuna_pruning.json"  # in the sweep directory, written by the search
PRUNERS = {
    "median": "optuna.pruners.MedianPruner",
    "hyperband": "optuna.pruners.HyperbandPruner",
    "none": None,
}


def _pruner_class(name: str) -> Any:
    import importlib

    module, _, cls = PRUNERS[name].rpartition(".")  # type: ignore[union-attr]
    return getattr(importlib.import_module(module), cls)


def check(name: Any, kwargs: Any) -> tuple[str, dict[str, Any]]:
    """`hydra.sweeper.pruner` and `hydra.sweeper.pruner_kwargs`, checked against the pruner
    class's own signature (a wrong key is refused before the search starts)."""
    name = "none" if name is None else name
    choice(name, "hydra.sweeper.pruner", PRUNERS)
    kwargs = dict(kwargs or {})
    if name == "none":
        if kwargs:
            raise ConfigError(
                "hydra.sweeper.pruner_kwargs", kwargs, "{} with pruner=none (or set a pruner)"
            )
        return name, kwargs
    parameters = inspect.signature(_pruner_class(name)).parameters
    for key, value in kwargs.items():
        if key not in parameters:
            hint = nearest(key, sorted(parameters), "hydra.sweeper.pruner_kwargs.", "valid: ")
            raise ConfigError(f"hydra.sweeper.pruner_kwargs.{key}", value, hint)
    try:
        build(name, kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError("hydra.sweeper.pruner_kwargs", kwargs, str(error)) from None
    return name, kwargs


def build(name: str, kwargs: dict[str, Any]) -> Any:
    """The optuna pruner (NopPruner for none)."""
    import optuna

    if name == "none":
        return optuna.pruners.NopPruner()
    return _pruner_class(name)(**kwargs)


def write_spec(sweep_dir: Path, storage: str, study_name: str, name: str, kwargs: dict) -> None:
    """Tell the trials of this sweep where to report (none: remove a stale file)."""
    path = Path(sweep_dir) / SPEC
    if name == "none" or not storage:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = {"storage": storage, "study_name": study_name, "pruner": name, "pruner_kwargs": kwargs}
    with atomically(path, fsync=False) as temporary:
        temporary.write_text(json.dumps(spec), encoding="utf-8")


def absolute_sqlite(url: str) -> str:
    """A trial may run in another working directory (a Slurm job): the storage by its full path."""
    if isinstance(url, str) and url.startswith("sqlite:///"):
        return "sqlite:///" + str(Path(url.removeprefix("sqlite:///")).absolute())
    return url


class TrialReporter:
    """This run's trial in the study: report a value per evaluation, ask the pruner. Only
    rank 0 talks to the storage; the others answer False (the monitor takes rank 0's)."""

    def __init__(self, trial: Any, number: int) -> None:
        self.trial = trial
        self.number = number

    @classmethod
    def for_run(cls, run_dir: Path) -> TrialReporter | None:
        spec_path = Path(run_dir).parent / SPEC
        if not spec_path.is_file() or not Path(run_dir).name.isdigit():
            return None
        from experiments import distributed_env

        number = int(Path(run_dir).name)
        if distributed_env.rank() != 0:
            return cls(None, number)
        try:
            spec = json.loads(spec_path.read_text(encoding="utf-8"))
            trial = _open_trial(spec, number)
        except Exception as error:  # never fail a run over its reporting
            log.warning("pruning off for this run: trial %d not opened (%s)", number, error)
            trial = None
        # without a trial this rank reports nothing, but still answers the other ranks
        return cls(trial, number)

    def report(self, value: float, step: int) -> bool:
        """Report, then the pruner's verdict (False on the other ranks)."""
        if self.trial is None:
            return False
        if math.isnan(value):  # Optuna 2.10's storage refuses NaN: the worst value instead
            from optuna.study import StudyDirection

            maximize = self.trial.study.direction == StudyDirection.MAXIMIZE
            value = -math.inf if maximize else math.inf
        try:
            self.trial.report(value, step)
            prune = bool(self.trial.should_prune())
        except Exception as error:
            log.warning("pruning off for this run: trial %d: %s", self.number, error)
            self.trial = None
            return False
        if prune:
            log.warning("trial %d pruned at evaluation %d (value %s)", self.number, step, value)
        return prune


def _open_trial(spec: dict[str, Any], number: int) -> Any:
    """The RUNNING trial `number` of the spec's study (None when it is not running: a run
    re-started by hand after its search ended reports nothing)."""
    import optuna
    from optuna.trial import Trial, TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.load_study(
            study_name=spec["study_name"],
            storage=spec["storage"],
            pruner=build(spec["pruner"], spec.get("pruner_kwargs") or {}),
        )
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            if trial.state != TrialState.RUNNING:
                return None
            return Trial(study, trial._trial_id)
    return None
