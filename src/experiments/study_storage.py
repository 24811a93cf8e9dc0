"""Where a search's Optuna study is stored, and how every process opens it.

A search's login asks and tells, and each trial's rank 0 reports to the same study when the
search prunes, from whichever node its Slurm job runs on. The study's storage therefore lives
on the shared filesystem, and SQLite is the wrong file for it there: Optuna's own docs say not
to use SQLite for parallel optimization, and its fcntl locks are broken on many NFS
implementations ("database is locked"). The default is Optuna's journal instead: an
append-only file (`optuna.journal` in the sweep directory, `JournalFileBackend`) whose writers
take `JournalFileOpenLock`, an `open(O_CREAT | O_EXCL)` lock file that NFS v3 and later make
atomic. `optuna-dashboard <that file>` opens it as it is.

A storage is one string (`hydra.sweeper.storage`): a URL (`sqlite:///`, `postgresql://`,
`mysql://`, Optuna's RDBStorage) or else a journal file's path. Every storage call that may
meet a busy or briefly unreachable storage goes through `retrying`: a few tries with
backoff, then one line naming the storage and the last error (StorageUnavailable).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from experiments.errors import ConfigError

log = logging.getLogger(__name__)

JOURNAL = "optuna.journal"  # the default storage, in the sweep directory
DATABASES = ("sqlite", "postgresql", "mysql")  # RDBStorage's URL schemes we accept
# Tries of one storage call, and the wait before the second (doubled each time after):
# 0.5 + 1 + 2 + 4 + 8 = 15.5 s of waiting before a call is given up.
ATTEMPTS = 6
FIRST_WAIT_S = 0.5

T = TypeVar("T")


class StorageUnavailable(RuntimeError):
    """A storage call that failed every try: its message is the one line users see."""


def kind(storage: str | None) -> str | None:
    """`journal`, `sqlite`, `postgresql`, `mysql`, another URL's scheme, or None (in memory)."""
    if storage is None:
        return None
    scheme, found, _ = str(storage).partition("://")
    if not found:
        return "journal"
    return scheme.split("+", 1)[0]  # postgresql+psycopg2:// is postgresql


def check(storage: Any) -> str | None:
    """`hydra.sweeper.storage` as a string (None: an in-memory study), refused in one line
    when it is neither a journal file nor one of the databases."""
    if storage is None:
        return None
    if not isinstance(storage, str) or not storage.strip():
        raise ConfigError("hydra.sweeper.storage", storage, _VALID)
    if kind(storage) not in ("journal", *DATABASES):
        raise ConfigError("hydra.sweeper.storage", storage, _VALID)
    return storage


_VALID = (
    "a journal file (the default: ${hydra.sweep.dir}/optuna.journal), a sqlite:///, "
    "postgresql:// or mysql:// URL, or null (in memory)"
)


def file_of(storage: str | None) -> Path | None:
    """The file a journal or SQLite storage keeps the study in (None for a server)."""
    if kind(storage) == "journal":
        return Path(str(storage))
    if kind(storage) == "sqlite" and str(storage).startswith("sqlite:///"):
        return Path(str(storage).removeprefix("sqlite:///"))
    return None


def absolute(storage: str | None) -> str | None:
    """The storage by its full path: a trial may run in another working directory (a Slurm
    job)."""
    path = file_of(storage)
    if path is None:
        return storage
    if kind(storage) == "journal":
        return str(path.absolute())
    return "sqlite:///" + str(path.absolute())


def open_storage(storage: str) -> Any:
    """Optuna's storage object for the string (a journal file: its NFS-safe lock)."""
    import optuna

    if kind(storage) == "journal":
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        path = str(storage)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path))
        return optuna.storages.JournalStorage(backend)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its INFO lines at every open
    return optuna.storages.RDBStorage(str(storage))


def transient_errors() -> tuple[type[BaseException], ...]:
    """What a busy or briefly unreachable storage raises: a database's errors (Optuna wraps
    most in StorageInternalError; "database is locked" is SQLAlchemy's OperationalError) and
    a filesystem's (a journal file on NFS)."""
    from optuna.exceptions import StorageInternalError

    errors: tuple[type[BaseException], ...] = (StorageInternalError, OSError)
    try:
        from sqlalchemy.exc import OperationalError
        from sqlalchemy.exc import TimeoutError as PoolTimeout
    except ImportError:  # pragma: no cover (sqlalchemy comes with optuna)
        return errors
    return (*errors, OperationalError, PoolTimeout)


def retrying(
    what: str,
    call: Callable[[], T],
    storage: str | None,
) -> T:
    """`call()`, tried again with backoff while the storage fails (ATTEMPTS tries, waiting
    FIRST_WAIT_S, then twice as long each time); StorageUnavailable (one line: what was being
    done, the storage, the tries and the last error) once the tries are used up. Errors of
    the call's own logic (a ValueError, a finished trial) pass at once."""
    errors = transient_errors()
    attempts, wait = ATTEMPTS, FIRST_WAIT_S
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except errors as error:
            last = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            if attempt == attempts:
                raise StorageUnavailable(
                    f"the study's storage {storage} failed {attempts} times while {what} ({last})"
                ) from error
            log.warning(
                "storage %s: %s failed (%s); trying again in %.1f s", storage, what, last, wait
            )
            time.sleep(wait)
            wait *= 2
    raise AssertionError("unreachable")  # pragma: no cover
