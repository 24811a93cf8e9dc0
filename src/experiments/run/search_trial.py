"""This run as a trial of an Optuna search: where the search keeps its study, and the reports a
pruned search's trial makes to it (`hydra.sweeper.pruner`, docs/sweeps.md#pruning).

A search's trials are whole runs in other processes (local children, torchrun ranks, Slurm
jobs), which never see the search's study object. So the search writes
`<sweep dir>/.optuna_study.json` (storage, study, pruner and its settings) before it launches
a trial (sweepers/optuna.py); a trial's run directory is `<sweep dir>/<trial number>`, so each
run finds its trial without any extra override. After each evaluation the run's rank 0
reports its objective to the study's storage (`trial.report`) and asks the pruner
(`trial.should_prune`); a pruned run ends at once (run/early_stopping.py raises Pruned,
train.py records `pruned`), and the search marks the trial PRUNED and goes on.

A storage that fails is tried again with backoff (study_storage.retrying). One that stays
unreachable does not end the run, and does not turn pruning off silently: the trial goes on
unpruned, one warning line says so in its log, and `pruning_off` in its summary.json says
from which evaluation and why (the search copies it into the trial's user attributes).
The report and `experiments-report --dashboard` find the study through the same file.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from experiments import study_storage
from experiments.run.record import atomically, read_json

log = logging.getLogger(__name__)

SPEC = ".optuna_study.json"  # in the sweep directory, written by the search
LEGACY_SPEC = ".optuna_pruning.json"  # its name before Optuna 5 (pruned searches only)
PRUNERS = {
    "median": "optuna.pruners.MedianPruner",
    "hyperband": "optuna.pruners.HyperbandPruner",
    # Paired over the steps a trial and the best trial both reported: for evaluations that
    # are comparable step by step (the same evaluation data at each step).
    "wilcoxon": "optuna.pruners.WilcoxonPruner",
    "none": None,
}


def pruner_class(name: str) -> Any:
    import importlib

    module, _, cls = PRUNERS[name].rpartition(".")  # type: ignore[union-attr]
    return getattr(importlib.import_module(module), cls)


def build_pruner(name: str, kwargs: dict[str, Any]) -> Any:
    """The optuna pruner (NopPruner for none)."""
    import warnings

    import optuna

    if name == "none":
        return optuna.pruners.NopPruner()
    with warnings.catch_warnings():
        # chosen by name in the config: Optuna's "experimental" (WilcoxonPruner) is known
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return pruner_class(name)(**kwargs)


def write_spec(
    sweep_dir: Path, storage: str | None, study_name: str, pruner: str, kwargs: dict[str, Any]
) -> None:
    """Tell the trials, the report and the dashboard where the study is (an in-memory study:
    nowhere, and a stale file goes)."""
    sweep_dir = Path(sweep_dir)
    (sweep_dir / LEGACY_SPEC).unlink(missing_ok=True)
    path = sweep_dir / SPEC
    if not storage:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = {
        "storage": study_storage.absolute(storage),
        "study_name": study_name,
        "pruner": pruner,
        "pruner_kwargs": kwargs,
    }
    with atomically(path, fsync=False) as temporary:
        temporary.write_text(json.dumps(spec), encoding="utf-8")


def read_spec(sweep_dir: Path) -> dict[str, Any] | None:
    """Where the search in `sweep_dir` keeps its study (None: not a search, or in memory)."""
    spec = read_json(Path(sweep_dir) / SPEC)
    if spec is None or not spec.get("storage") or not spec.get("study_name"):
        return None
    return spec


class TrialReporter:
    """This run's trial in the study: report a value per evaluation, ask the pruner. Only
    rank 0 talks to the storage; the others answer False (the monitor takes rank 0's).
    `off`: why this trial stopped reporting, if it did (None while it reports)."""

    def __init__(self, trial: Any, number: int, storage: str | None = None) -> None:
        self.trial = trial
        self.number = number
        self.storage = storage
        self.off: str | None = None

    @classmethod
    def for_run(cls, run_dir: Path) -> TrialReporter | None:
        spec_path = Path(run_dir).parent / SPEC
        if not spec_path.is_file() or not Path(run_dir).name.isdigit():
            return None
        spec = read_spec(Path(run_dir).parent)
        if spec is None or spec.get("pruner", "none") == "none":
            return None
        from experiments import distributed_env

        number = int(Path(run_dir).name)
        if distributed_env.rank() != 0:
            return cls(None, number)
        try:
            trial = _open_trial(spec, number)
        except study_storage.StorageUnavailable as error:
            reporter = cls(None, number, spec["storage"])
            reporter.stop_reporting(0, str(error))
            return reporter
        # None: a run re-started by hand after its search ended (its trial is no longer
        # RUNNING) reports nothing
        return cls(trial, number, spec["storage"])

    def report(self, value: float, step: int) -> bool:
        """Report, then the pruner's verdict (False on the other ranks, and once the
        storage has failed for good)."""
        if self.trial is None:
            return False
        if math.isnan(value):  # the worst value: every pruner ranks it last
            from optuna.study import StudyDirection

            maximize = self.trial.study.direction == StudyDirection.MAXIMIZE
            value = -math.inf if maximize else math.inf

        def report_and_ask() -> bool:
            # Tried again after a report that was stored, Optuna ignores the second one.
            self.trial.report(value, step)
            return bool(self.trial.should_prune())

        what = f"trial {self.number} reported evaluation {step}"
        try:
            prune = study_storage.retrying(what, report_and_ask, self.storage)
        except study_storage.StorageUnavailable as error:
            self.stop_reporting(step, str(error))
            return False
        if prune:
            log.warning("trial %d pruned at evaluation %d (value %s)", self.number, step, value)
        return prune

    def stop_reporting(self, step: int, why: str) -> None:
        """The storage failed for good: this trial runs on unpruned, and says so."""
        self.trial = None
        self.off = f"from evaluation {step + 1} on (reports stopped): {why}"
        log.warning("trial %d runs unpruned %s", self.number, self.off)


def _open_trial(spec: dict[str, Any], number: int) -> Any:
    """The RUNNING trial `number` of the spec's study (None when it is not running)."""
    import optuna
    from optuna.trial import Trial, TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = spec["storage"]

    def load() -> Any:
        study = optuna.load_study(
            study_name=spec["study_name"],
            storage=study_storage.open_storage(url),
            pruner=build_pruner(spec["pruner"], spec.get("pruner_kwargs") or {}),
        )
        trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
        if study._storage.get_trial(trial_id).state != TrialState.RUNNING:
            return None
        return Trial(study, trial_id)

    try:
        return study_storage.retrying(f"trial {number} opened its study", load, url)
    except KeyError:  # no such trial in the study
        return None
