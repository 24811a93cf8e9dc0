"""Optuna's own figures of a search, from the study its sweep directory names
(`.optuna_study.json`: run/search_trial.py; by default its `optuna.journal`).

Called by the sweep report, also while the search is still running: whatever the study's state
(no trial completed yet, trials RUNNING or FAIL, a storage being written), it writes what it
can and never raises.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments import study_storage
from experiments.report.points import replacing
from experiments.run.search_trial import read_spec

log = logging.getLogger(__name__)

HISTORY = "optuna_history.png"
IMPORTANCES = "optuna_importances.png"
PARALLEL_COORDINATE = "optuna_parallel_coordinate.png"


def study_of(sweep_dir: Path) -> tuple[str, str] | None:
    """(storage, study name) of the search in `sweep_dir`, None for a sweep that is no search
    (or one whose study lived in memory)."""
    spec = read_spec(sweep_dir)
    if spec is None:
        return None
    return spec["storage"], spec["study_name"]


def write_optuna_figures(sweep_dir: Path) -> list[str]:
    """Optimization history, parallel coordinates and parameter importances of the search's
    study, as PNGs in `sweep_dir`. Importances need completed trials with at least two
    different values (Optuna refuses a single trial; equal values explain nothing). Returns
    the names of the files written: [] without a study or a completed trial."""
    sweep_dir = Path(sweep_dir)
    where = study_of(sweep_dir)
    if where is None:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ExperimentalWarning (Optuna's matplotlib figures)
        try:
            study = _load_study(*where)
        except Exception as error:  # not a study yet, a storage being written, ...
            log.warning("Optuna figures not written: cannot load %s: %s", where[0], error)
            return []
        if len(study.directions) != 1 or not _completed(study):
            return []  # the figures below plot one objective
        from optuna.visualization import matplotlib as figures

        plots: list[tuple[str, Callable[[], Any]]] = [
            (HISTORY, lambda: figures.plot_optimization_history(study)),
            (PARALLEL_COORDINATE, lambda: figures.plot_parallel_coordinate(study)),
        ]
        if len({t.value for t in _completed(study)}) >= 2:  # else there is nothing to explain
            plots.append((IMPORTANCES, lambda: figures.plot_param_importances(study)))
        return [name for name, plot in plots if _save(plot, sweep_dir / name)]


def _load_study(storage: str, study_name: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if study_storage.file_of(storage) is not None and not study_storage.file_of(storage).exists():
        raise FileNotFoundError(storage)  # opening would create it
    return optuna.load_study(study_name=study_name, storage=study_storage.open_storage(storage))


def _completed(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def _save(plot: Callable[[], Any], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    open_before = set(plt.get_fignums())
    try:
        # A report being read never sees half a PNG. Optuna sets the ggplot style globally:
        # the report's own figures keep theirs.
        with replacing(path) as temporary, matplotlib.rc_context():
            figure = plot().get_figure()
            figure.savefig(temporary, format="png", dpi=100, bbox_inches="tight")
        return True
    except Exception as error:
        log.warning("Optuna figure %s not written: %s: %s", path.name, type(error).__name__, error)
        return False
    finally:
        for number in set(plt.get_fignums()) - open_before:  # only the figures made here
            plt.close(number)
