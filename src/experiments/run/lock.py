"""One writer per run directory (and one launch per sweep directory; what the user sees:
docs/checkpoints.md).

Two processes writing one run directory (a second terminal with the same `hydra.run.dir`, a
sweep launched again while its first launch runs, a user's re-run next to a Slurm requeue)
both train, and every step ends up twice in the logs. So every process of a run holds a POSIX
lock (fcntl.lockf, not flock: it also works over NFS) on `<run dir>/.run.lock` for its
lifetime; the kernel releases it however the process ends (SIGKILL included), so a lock is
never stale.

The lock is taken by the run's owner alone (role.py: a single run's own process, a local
sweep's point, rank 0 of a Slurm job); the processes it starts do not take it. Whoever comes
first takes the lock exclusively, writes the holder (host, pid, Slurm job, the run's token)
into the file, and turns it into a shared lock (atomic for POSIX locks). A process that finds
the lock taken reads the holder: the launching processes of one multi-node torchrun launch
(the same token on every node) join it with a shared lock; anyone else is refused, in one
line naming the holder, before it writes anything. A Slurm requeue of the same job is a new
attempt: its rank 0 waits for its previous attempt to let go (Slurm is ending it) and takes
over. The holder may publish more in its record (`publish`: where its ranks report,
run/channel.py). `holder()` reads who holds a directory without disturbing it (for the status
command and the ranks).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import distributed_env, role
from experiments.errors import ConfigError

RUN_LOCK = ".run.lock"
SWEEP_LOCK = ".sweep.lock"
# The holder's token, handed to the ranks a run's owner starts: the key of the channel they
# report through (run/channel.py).
TOKEN_ENV = "EXPERIMENTS_RUN_LOCK"
# A holder writes its record microseconds after taking the lock: a process that finds the
# lock taken and no (or an old) record looks again for this long before it refuses.
GRACE_S = 2.0
# How long a requeued Slurm job waits for its previous attempt to end (Slurm sends it SIGTERM
# and, after KillWait (30 s by default), SIGKILL).
REQUEUE_WAIT_S = 180.0
POLL_S = 0.05


class RunDirRefused(ConfigError):
    """A directory this run must not write into: refused in one line before anything is
    written (exit 2); a sweep's login writes nothing into it either (train.py)."""


class RunDirInUse(RunDirRefused):
    """Another run holds this directory."""

    def __init__(self, path: Path, record: dict[str, Any] | None, sweep: bool = False) -> None:
        super().__init__("hydra.sweep.dir" if sweep else "hydra.run.dir", str(path), "in use")
        self.record = record or {}
        what = "sweep" if sweep else "run directory"
        stop = (
            "wait for it to end or stop it (Ctrl-C at its terminal); then the same command "
            "continues the sweep"
            if sweep
            else "wait for it to end or stop it, or set another hydra.run.dir"
        )
        Exception.__init__(self, f"{what} {path} is in use by {describe(self.record)}: {stop}")


class ForeignRunDir(RunDirRefused):
    """A run directory written in a record format this package cannot read (a newer one)."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__("hydra.run.dir", str(path), why)
        Exception.__init__(self, f"run directory {path} was {why}, or set another hydra.run.dir")


def check_readable(run_dir: Path) -> None:
    """Refuse a run directory whose record this package cannot read, naming the version
    that wrote it (older record formats are read)."""
    from experiments.run.record import foreign_format, read_summary

    summary = read_summary(Path(run_dir))
    foreign = foreign_format(summary) if summary else None
    if foreign:
        raise ForeignRunDir(Path(run_dir), foreign)


def refuse_if_held(directory: Path, name: str = RUN_LOCK, ours: str | None = None) -> None:
    """Before a launching process plans anything: a directory another run holds is refused
    naming the holder (else a config check reading that run's record would answer first).
    The nodes of one multi-node torchrun launch hold it together: they pass here and join
    in `hold`. `ours`: this process's attempt at a Slurm job, whose every attempt's rank 0
    holds the run for it (another task of the job passes)."""
    found = holder(directory, name)
    if found is None:
        return
    token = str(found.get("token", ""))
    job = ours.rsplit(":", 1)[0] + ":" if ours else None  # slurm:<job>: of any attempt
    if not token.startswith("torchrun:") and not (job and token.startswith(job)):
        raise RunDirInUse(_real(directory), found, sweep=name == SWEEP_LOCK)


@dataclass
class Held:
    fd: int
    token: str
    record: dict[str, Any]  # the holder's: this process's own, unless it joined (`first`)
    first: bool  # this process took the lock first (a joiner shares it)


_held: dict[str, Held] = {}


def describe(record: dict[str, Any]) -> str:
    """`host h, pid p, Slurm job j, since t` from a holder record."""
    if not record:
        return "another process (it has not said who yet)"
    parts = [f"host {record.get('host')}", f"pid {record.get('pid')}"]
    if record.get("slurm_job_id"):
        job = f"Slurm job {record['slurm_job_id']}"
        if record.get("slurm_restart_count"):
            job += f" (requeue {record['slurm_restart_count']})"
        parts.append(job)
    if record.get("since"):
        parts.append(f"since {record['since']}")
    return ", ".join(parts)


def _token(shared: str | None, slurm: tuple[str, int] | None) -> str:
    """This process's run: a Slurm job's attempt (`slurm`: its job and requeue count), a token
    shared by all nodes of one launch (`shared`), else a fresh one (a run of its own)."""
    if slurm is not None:
        return f"slurm:{slurm[0]}:{slurm[1]}"
    if shared:
        return shared
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _record(token: str, slurm: tuple[str, int] | None) -> dict[str, Any]:
    return {
        "token": token,
        "host": distributed_env.node(),
        "pid": os.getpid(),
        "slurm_job_id": slurm[0] if slurm else None,
        "slurm_restart_count": slurm[1] if slurm else None,
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _read(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 65536, 0)
        record = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _try(fd: int, kind: int) -> bool:
    try:
        fcntl.lockf(fd, kind | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def hold(directory: Path, name: str = RUN_LOCK, shared: str | None = None) -> Held:
    """Hold `directory`'s lock for the rest of this process (idempotent). Raises RunDirInUse
    naming the holder when another run holds it. Creates the directory (and the lock file in
    it) if needed: that is all a refused run could have written. `shared` is a token every
    node of a multi-node launch computes alike (they join one another)."""
    directory = _real(directory)
    path = directory / name
    if str(path) in _held:
        return _held[str(path)]
    directory.mkdir(parents=True, exist_ok=True)
    slurm = role.of_process().slurm_job  # a Slurm task's run is its job's
    token = _token(shared, slurm)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    started = time.monotonic()
    try:
        while True:
            if _try(fd, fcntl.LOCK_EX):
                record, first = _record(token, slurm), True
                _write(fd, record)
                fcntl.lockf(fd, fcntl.LOCK_SH)  # atomic downgrade: the run's others may join
                break
            found = _read(fd)
            if found.get("token") == token and _try(fd, fcntl.LOCK_SH):
                record, first = found, False  # another node's launch of the same run: join
                break
            waited = time.monotonic() - started
            if waited < GRACE_S or (_requeue_of(found, token) and waited < REQUEUE_WAIT_S):
                time.sleep(POLL_S)
                continue
            raise RunDirInUse(directory, found, sweep=name == SWEEP_LOCK)
    except BaseException:
        os.close(fd)
        raise
    held = Held(fd, token, record, first)
    _held[str(path)] = held
    return held


def _write(fd: int, record: dict[str, Any]) -> None:
    """The holder record, over the file's bytes from the start, then cut to its length."""
    data = json.dumps(record).encode("utf-8")
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


def publish(directory: Path, **fields: Any) -> None:
    """Add `fields` to the record of a lock this process took first (a reader sees the old
    record or the new one)."""
    held = _held[str(_real(directory) / RUN_LOCK)]
    held.record = {**held.record, **fields}
    _write(held.fd, held.record)


def _real(directory: Path) -> Path:
    """One name per directory (`..`, symlinks resolved): a POSIX lock is the process's, and a
    second descriptor of the same file opened and closed under another name would drop it."""
    return Path(os.path.realpath(directory))


def _requeue_of(found: dict[str, Any], token: str) -> bool:
    """The holder is an earlier attempt of this process's own Slurm job (this is a requeue)."""
    holder, own = str(found.get("token", "")).split(":"), token.split(":")
    return (
        len(holder) == 3
        and len(own) == 3
        and holder[0] == own[0] == "slurm"
        and holder[1] == own[1]
        and holder[2].isdigit()
        and own[2].isdigit()
        and int(holder[2]) < int(own[2])
    )


def held(directory: Path, name: str = RUN_LOCK) -> Held | None:
    """This process's hold on `directory`'s lock, if it has one."""
    return _held.get(str(_real(directory) / name))


def child_env(directory: Path, name: str = RUN_LOCK) -> dict[str, str]:
    """What the ranks this process starts for its run are handed: the lock's token, the key
    of the channel they report through (they do not take the lock)."""
    mine = held(directory, name)
    return {TOKEN_ENV: mine.token} if mine else {}


def release(directory: Path, name: str = RUN_LOCK) -> None:
    """Let go early (a sweep's login after a point ended); process exit does it anyway."""
    held = _held.pop(str(_real(directory) / name), None)
    if held is not None:
        with contextlib.suppress(OSError):
            os.close(held.fd)


def holder(directory: Path, name: str = RUN_LOCK) -> dict[str, Any] | None:
    """Who holds `directory` now (their record), or None when nobody does. Never disturbs
    the holder: closing a second descriptor of a file would drop this process's own POSIX
    lock, so a lock this process holds is answered from memory."""
    path = _real(directory) / name
    if str(path) in _held:
        return _held[str(path)].record
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if _try(fd, fcntl.LOCK_SH):  # nobody holds it exclusively ...
            fcntl.lockf(fd, fcntl.LOCK_UN)
            if _try(fd, fcntl.LOCK_EX):  # ... nor shared
                fcntl.lockf(fd, fcntl.LOCK_UN)
                return None
        return _read(fd) or {}
    finally:
        os.close(fd)
