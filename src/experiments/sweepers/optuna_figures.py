"""Optuna's own figures of a search whose study is stored in its sweep directory (optuna.db).

Called by the sweep report, also while the search is still running: whatever the study's state
(no trial completed yet, trials RUNNING or FAIL, a storage being written), it writes what it
can and never raises.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from experiments.report.points import replacing

log = logging.getLogger(__name__)

STORAGE_FILE = "optuna.db"  # experiments.sweepers.optuna keeps the study there
HISTORY = "optuna_history.png"
IMPORTANCES = "optuna_importances.png"
PARALLEL_COORDINATE = "optuna_parallel_coordinate.png"


def write_optuna_figures(sweep_dir: Path) -> list[str]:
    """Optimization history, parallel coordinates and parameter importances of the study in
    `sweep_dir`/optuna.db, as PNGs in `sweep_dir`. Importances need completed trials with at
    least two different values (Optuna refuses a single trial; equal values explain nothing).
    Returns the names of the files written: [] without a storage or a completed trial."""
    sweep_dir = Path(sweep_dir)
    storage = sweep_dir / STORAGE_FILE
    if not storage.is_file():
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ExperimentalWarning; optuna 2.10 on SQLAlchemy 2
        try:
            study = _load_study(f"sqlite:///{storage.resolve()}")
        except Exception as error:  # not a study yet, a storage being written, ...
            log.warning("Optuna figures not written: cannot load %s: %s", storage, error)
            return []
        if study is None or len(study.directions) != 1 or not _completed(study):
            return []  # the figures below plot one objective
        from optuna.importance import MeanDecreaseImpurityImportanceEvaluator
        from optuna.visualization import matplotlib as figures

        plots: list[tuple[str, Callable[[], Any]]] = [
            (HISTORY, lambda: figures.plot_optimization_history(study)),
            (PARALLEL_COORDINATE, lambda: figures.plot_parallel_coordinate(study)),
        ]
        if len({t.value for t in _completed(study)}) >= 2:  # else there is nothing to explain
            # fANOVA, Optuna 2.10's default evaluator, fails on scikit-learn >= 1.3's trees.
            evaluator = MeanDecreaseImpurityImportanceEvaluator(seed=0)
            plots.append(
                (IMPORTANCES, lambda: figures.plot_param_importances(study, evaluator=evaluator))
            )
        return [name for name, plot in plots if _save(plot, sweep_dir / name)]


def _load_study(url: str) -> Any:
    """The study in the storage (the most recently created one, should there be several)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    summaries = optuna.get_all_study_summaries(storage=url)
    if not summaries:
        return None
    latest = max(summaries, key=lambda s: s._study_id)
    return optuna.load_study(study_name=latest.study_name, storage=url)


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
        with (
            replacing(path) as temporary,
            matplotlib.rc_context(),
            _optuna_2_on_current_matplotlib(),
        ):
            figure = plot().get_figure()
            _log_axes_in_values(figure)
            figure.savefig(temporary, format="png", dpi=100, bbox_inches="tight")
        return True
    except Exception as error:
        log.warning("Optuna figure %s not written: %s: %s", path.name, type(error).__name__, error)
        return False
    finally:
        for number in set(plt.get_fignums()) - open_before:  # only the figures made here
            plt.close(number)


@contextlib.contextmanager
def _optuna_2_on_current_matplotlib() -> Iterator[None]:
    """Optuna 2.10's matplotlib figures predate matplotlib 3.6-3.9; for the length of one plot:
    - its parallel-coordinate plot adds a colorbar for a collection not yet on any axes, which
      matplotlib >= 3.6 refuses unless told which axes to take the space from: the figure's
      current axes (what older matplotlib took by itself);
    - its importances plot calls matplotlib.cm.get_cmap, removed in matplotlib 3.9."""
    import matplotlib.cm
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    original = Figure.colorbar

    def colorbar(self: Figure, mappable: Any, cax: Any = None, ax: Any = None, **kwargs: Any):
        if cax is None and ax is None and getattr(mappable, "axes", None) is None:
            ax = self.gca()
        return original(self, mappable, cax=cax, ax=ax, **kwargs)

    had_get_cmap = hasattr(matplotlib.cm, "get_cmap")
    Figure.colorbar = colorbar  # type: ignore[method-assign]
    if not had_get_cmap:
        matplotlib.cm.get_cmap = plt.get_cmap  # type: ignore[attr-defined]
    try:
        yield
    finally:
        Figure.colorbar = original  # type: ignore[method-assign]
        if not had_get_cmap:
            del matplotlib.cm.get_cmap


def _log_axes_in_values(figure: Any) -> None:
    """Optuna 2.10's parallel-coordinate plot gives a log-scaled parameter's axis the limits
    log10(low), log10(high) on a log scale: matplotlib >= 3.10 refuses to draw it (all limits
    <= 0) and older ones labelled it wrongly. The axis spans the parameter's values."""
    for axes in figure.axes:
        if axes.get_yscale() == "log":
            low, high = axes.get_ylim()
            axes.set_ylim(10**low, 10**high)
