"""Which rank of a multi-rank run failed, and why: the dead rank's error, not its peers' echo
(what the run reports: docs/topologies.md).

When one rank dies, its peers fail a moment later with errors that only say a peer went away
("Connection closed by peer"), or, when it died before they connected, they wait in the
rendezvous until its timeout (30 minutes). So every rank that fails reports to the run's
owner by writing `failures/rank_<k>.json` before it exits; the owner (torchrun's launching
process, or a Slurm job's rank 0) and Slurm's login read the records to name the cause. The
run directory is shared by every rank, so this needs nothing but the filesystem: torchrun and
Slurm, one node or many, gloo and NCCL.

Stopping the peers is torch's and Slurm's where they can: torchrun's agent stops the ranks of
its node when one fails (and the launching process names the cause). Its peers on other nodes
and a Slurm job's other tasks are no child of that agent, and a rank blocked in the rendezvous
acts on no signal (Slurm's --kill-on-bad-exit SIGTERMs it, then SIGKILLs it after KillWait,
unrecorded): those ranks watch the folder (`Watchdog`) and stop within a second or two of a
peer's record, the owner recording the run as failed under that peer's cause.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments import distributed_env, role
from experiments.run.record import atomically, read_json

log = logging.getLogger(__name__)

FOLDER = "failures"
# How a peer's death looks from the ranks that survive it (gloo, NCCL, the TCP store).
_ECHOES = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote worker crash",
    "socket timeout",
    "connection refused",
    "nccl communicator was aborted",
    "process group watchdog",
)
POLL_S = 1.0


def attempt() -> str | None:
    """This process's attempt at the run (records of an earlier attempt are history): the
    Slurm job and its requeue count, or torchrun's run id and restart round. None outside a
    multi-rank launch."""
    return role.of_process().attempt


def is_echo(error: str) -> bool:
    """True for an error that only reports that another rank went away."""
    text = error.lower()
    return any(echo in text for echo in _ECHOES)


def write(run_dir: Path, rank: int, error: str, logs: list[str]) -> dict[str, Any]:
    record = {
        "rank": rank,
        "node": distributed_env.node(),
        "error": error,
        "log": logs[0] if logs else None,
        "logs": logs,
        "attempt": attempt(),
        "time": time.time(),
    }
    folder = run_dir / FOLDER
    folder.mkdir(exist_ok=True)
    with atomically(folder / f"rank_{rank}.json", fsync=False) as temporary:
        temporary.write_text(json.dumps(record, indent=2), encoding="utf-8")
    return record


def clear(run_dir: Path) -> None:
    """Forget the failed ranks of an earlier launch of this run (a rerun resumes it)."""
    for path in (run_dir / FOLDER).glob("rank_*.json"):
        path.unlink(missing_ok=True)


def read(run_dir: Path, of_attempt: str | None = None) -> list[dict[str, Any]]:
    """The failure records of `of_attempt` (of the newest attempt when None), oldest first."""
    records = [r for p in sorted((run_dir / FOLDER).glob("rank_*.json")) if (r := read_json(p))]
    if not records:
        return []
    wanted = of_attempt or max(records, key=lambda r: r["time"])["attempt"]
    return sorted((r for r in records if r["attempt"] == wanted), key=lambda r: r["time"])


def cause(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The failure that started it: the first error that is not a peer's echo (else the
    first)."""
    primary = [r for r in records if not is_echo(r["error"])]
    return (primary or records or [None])[0]


def describe(record: dict[str, Any]) -> str:
    """One line a user can act on: which rank, where, its error and where its traceback is."""
    return (
        f"rank {record['rank']} on {record['node']} failed: {record['error']} "
        f"(log: {record['log']})"
    )


def summary_fields(record: dict[str, Any]) -> dict[str, Any]:
    """What summary.json says of a multi-rank run that failed: the one line, and the record
    of the rank that caused it (the report and loggers read `failure`)."""
    return {
        "error": describe(record),
        "failure": {key: record.get(key) for key in ("rank", "node", "error", "log", "logs")},
    }


def wait_for_cause(run_dir: Path, own: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """The run's cause as seen by a failing rank: its own error, unless that error is an echo
    of a peer's death, then the peer's record (given up to `timeout_s` to appear: the peer
    may still be unwinding)."""
    deadline = time.time() + (timeout_s if is_echo(own["error"]) else 0)
    while True:
        found = cause(read(run_dir, own["attempt"]))
        if found is not None and not is_echo(found["error"]):
            return found
        if time.time() >= deadline:
            return own
        time.sleep(0.2)


class Watchdog:
    """Stops this rank when a peer of the same attempt has failed (where no agent of torch's
    stops it: the module docstring): its collectives would only fail later, or wait until a
    timeout. `on_peer_failure` runs first (rank 0 records the run as failed), then the process
    exits with status 1."""

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        on_peer_failure: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.run_dir, self.rank, self.on_peer_failure = run_dir, rank, on_peer_failure
        self.attempt = attempt()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="peer-watchdog", daemon=True)

    def start(self) -> Watchdog:
        if self.attempt is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(POLL_S):
            peers = [r for r in read(self.run_dir, self.attempt) if r["rank"] != self.rank]
            found = cause(peers)
            if found is None or self._stopped.is_set():
                continue
            log.error("stopping: %s", describe(found))
            try:
                if self.on_peer_failure is not None:
                    self.on_peer_failure(found)
            finally:
                os._exit(1)
