"""Searches whose study Optuna 2.10 wrote continue under Optuna 5 (docs/sweeps.md#optuna-search).

Optuna 5 refuses a database written by 2.10 until its schema is upgraded (five one-way
migrations), and 2.10 then refuses the upgraded file. Two routes, by the search's storage:
- the default journal (`optuna.journal`) with the old search's `optuna.db` beside it and no
  journal yet: the search started before Optuna 5, resumed by its own command. Its studies
  are copied into the journal: the database is upgraded in a scratch copy, each study's
  trials are added to a scratch journal in order (number, state, parameters, values,
  intermediate values, attributes and times kept), checked against the database, and the
  journal then takes its place. `optuna.db` is left as it was and no longer read.
- a `sqlite:///` storage named on the command line whose schema is older: upgraded in place,
  with a line saying that the upgrade is one-way. A server's database (postgresql://,
  mysql://) is shared with others: refused in one line naming Optuna's upgrade command.
Trials the old search left RUNNING stay RUNNING: the sweeper settles them from their run
directories as it does any killed search's.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

from experiments import study_storage

log = logging.getLogger(__name__)

LEGACY_DB = "optuna.db"  # where the search kept its study before Optuna 5


class OldSchema(RuntimeError):
    """A server's database with an older Optuna schema: one line, the search does not start."""


def prepare(storage: str) -> str | None:
    """Make the storage openable by this Optuna; the one-line notice of what was done, if
    anything was."""
    if study_storage.kind(storage) == "journal":
        return _journal_from_legacy(Path(storage))
    return _upgrade_database(storage)


def _journal_from_legacy(journal: Path) -> str | None:
    legacy = journal.with_name(LEGACY_DB)
    if journal.exists() or not legacy.is_file():
        return None
    scratch_db = journal.with_name(f".{LEGACY_DB}.migrating")
    scratch = journal.with_name(f".{journal.name}.migrating")
    shutil.copyfile(legacy, scratch_db)
    try:
        url = f"sqlite:///{scratch_db}"
        old_version = _upgrade(url)
        scratch.unlink(missing_ok=True)
        counts = _copy_studies(url, study_storage.open_storage(str(scratch)))
        os.replace(scratch, journal)
    finally:
        scratch_db.unlink(missing_ok=True)
        scratch.unlink(missing_ok=True)
    studies = ", ".join(f"{name!r} ({n} trials)" for name, n in counts.items())
    return (
        f"Migrated study {studies} from {legacy} (Optuna {old_version}'s SQLite) into "
        f"{journal}; {legacy.name} is left as it was and no longer read"
    )


def _upgrade_database(url: str) -> str | None:
    path = study_storage.file_of(url)
    if study_storage.kind(url) == "sqlite" and (path is None or not path.is_file()):
        return None  # a new database: Optuna creates it at the current schema
    from optuna.storages import RDBStorage

    storage = RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)
    current, head = storage.get_current_version(), storage.get_head_version()
    storage.engine.dispose()
    if current == head or current not in storage.get_all_versions():
        return None  # current, or not Optuna's: Optuna's own error says what it is
    if study_storage.kind(url) != "sqlite":
        raise OldSchema(
            f"the study's database {url} has an older Optuna schema ({current}); upgrade it "
            f"(one-way: older Optuna cannot open it after) with `optuna storage upgrade "
            f"--storage {url}`, then run the search again"
        )
    _upgrade(url)
    import optuna

    return (
        f"Upgraded {path} from Optuna schema {current} to {head} for Optuna "
        f"{optuna.__version__}; the upgrade is one-way: Optuna 2.10 cannot open it any more"
    )


def _upgrade(url: str) -> str:
    """Upgrade a database's schema to this Optuna's; the Optuna version that wrote it."""
    from optuna.storages import RDBStorage
    from optuna.storages._rdb import models
    from sqlalchemy.orm import Session

    storage = RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)
    with Session(storage.engine) as session:
        written_by = session.query(models.VersionInfoModel).one().library_version
    # Alembic's config turns its INFO lines on (one per migration), and the first migration
    # reads 2.10's distributions through their deprecated classes: neither is the user's.
    logging.disable(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            storage.upgrade()
    finally:
        logging.disable(logging.NOTSET)
        storage.engine.dispose()
    return written_by


def _copy_studies(url: str, target: Any) -> dict[str, int]:
    """Every study of the database into `target`; trial counts by study name."""
    import optuna

    counts = {}
    for summary in optuna.get_all_study_summaries(url, include_best_trial=False):
        counts[summary.study_name] = _copy_study(url, target, summary.study_name)
    return counts


def _copy_study(url: str, target: Any, name: str) -> int:
    import optuna

    source = optuna.load_study(study_name=name, storage=url)
    copy = optuna.create_study(study_name=name, storage=target, directions=source.directions)
    for key, value in source.user_attrs.items():
        copy.set_user_attr(key, value)
    for key, value in source._storage.get_study_system_attrs(source._study_id).items():
        target.set_study_system_attr(copy._study_id, key, value)
    trials = source.get_trials(deepcopy=False)
    copy.add_trials(trials)
    copied = copy.get_trials(deepcopy=False)
    if [_essence(t) for t in copied] != [_essence(t) for t in trials]:
        raise RuntimeError(f"study {name!r}: the journal's trials differ from {LEGACY_DB}'s")
    return len(trials)


def _essence(trial: Any) -> tuple[Any, ...]:
    return (
        trial.number,
        trial.state,
        trial.params,
        trial.values,
        trial.intermediate_values,
        trial.user_attrs,
        trial.system_attrs,
        trial.datetime_start,
        trial.datetime_complete,
    )
