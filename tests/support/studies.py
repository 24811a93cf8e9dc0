"""A search's study as the tests read it: through the file its sweep directory names
(run/search_trial.py's `.optuna_study.json`), opened as the search's own processes open it."""

from __future__ import annotations

from pathlib import Path

import optuna

from experiments import study_storage
from experiments.run.search_trial import read_spec


def only_study(sweep_dir: Path) -> optuna.Study:
    """The one study of the search in `sweep_dir` (its journal by default)."""
    spec = read_spec(sweep_dir)
    assert spec is not None, f"{sweep_dir}: no .optuna_study.json"
    storage = study_storage.open_storage(spec["storage"])
    (summary,) = optuna.get_all_study_summaries(storage=storage)
    assert summary.study_name == spec["study_name"]
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def study_trials(sweep_dir: Path) -> list[optuna.trial.FrozenTrial]:
    return only_study(sweep_dir).get_trials()
