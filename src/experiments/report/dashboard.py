"""`experiments-report SWEEP --dashboard`: optuna-dashboard (the optional `dashboard` extra,
`make setup-dashboard`) serving the search's study, from the storage its sweep directory names.

The same as `optuna-dashboard <sweep dir>/optuna.journal` for the default storage, with the
study's storage found for the user (a database URL too) and opened with the lock the search's
own processes take (study_storage.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

from experiments import study_storage
from experiments.errors import ConfigError
from experiments.run.search_trial import read_spec

INSTALL = "pip install 'optuna-dashboard>=0.21' (make setup-dashboard)"


def storage_of(sweep_dir: Path) -> str:
    """The search's storage; ConfigError (one line) when there is none to serve."""
    spec = read_spec(sweep_dir)
    journal = Path(sweep_dir) / study_storage.JOURNAL
    if spec is not None:
        return spec["storage"]
    if journal.is_file():
        return str(journal)
    raise ConfigError(
        "--dashboard",
        None,
        f"{sweep_dir} holds no Optuna study (a search writes {study_storage.JOURNAL} and "
        ".optuna_study.json; an Optuna 2.10 search's optuna.db is migrated when the search's "
        "own command runs again)",
    )


def serve(sweep_dir: Path, host: str, port: int) -> None:
    """Serve the study until Ctrl-C."""
    storage = storage_of(sweep_dir)
    if importlib.util.find_spec("optuna_dashboard") is None:
        raise ConfigError("--dashboard", None, f"optuna-dashboard is not installed: {INSTALL}")
    from optuna_dashboard import run_server

    print(f"Optuna dashboard of {storage} at http://{host}:{port}/ (Ctrl-C stops it)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        run_server(study_storage.open_storage(storage), host=host, port=port)
