"""How torchrun's ranks report to the owner of their run directory, the launching process.

The owner writes the run's record (summary.json, metrics.jsonl, steps.jsonl: RecordFiles);
rank 0, which trains, hands each write to it over this channel and waits for the answer, so
what it reads back afterwards is on disk. A rank that dies, or a restart round of torchrun,
leaves the owner and its record in place: the owner records how the launch ended when the
ranks could not (launchers/children.py).

The channel is the standard library's `multiprocessing.connection` (a TCP socket, messages
authenticated with the run's lock token, which the launching process hands its children).
The owner publishes its address in the run's lock record (run/lock.py), where rank 0 finds it
on whichever node torchrun placed it.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from experiments import distributed_env
from experiments.run import lock
from experiments.run.record import NoSpaceError, RecordFiles

ADDRESS = "record_to"  # the owner's address, in its lock record
# The calls a rank may make; each is a RecordFiles method.
CALLS = ("write_summary", "append", "truncate")
# How long rank 0 looks for the owner's address in the lock record.
FIND_S = 30.0


def _key(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class RecordServer:
    """The owner's end: it writes what its ranks report, through its RecordFiles. `summary`
    is the newest summary written, the launch's outcome once the ranks are done."""

    def __init__(self, files: RecordFiles, token: str, host: str | None = None) -> None:
        """`host` None: this machine alone (127.0.0.1); "0.0.0.0": every interface, its
        address then named by this node's name (the ranks of a multi-node launch)."""
        self.files = files
        self.summary: dict[str, Any] | None = None
        self._listener = Listener((host or "127.0.0.1", 0), authkey=_key(token))
        self._host = distributed_env.node() if host == "0.0.0.0" else "127.0.0.1"
        self._writing = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="record-server", daemon=True).start()

    @property
    def address(self) -> str:
        return f"{self._host}:{self._listener.address[1]}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):  # closed, or not one of ours
                continue
            threading.Thread(
                target=self._answer, args=(connection,), name="record-rank", daemon=True
            ).start()

    def _answer(self, connection: Connection) -> None:
        """One rank's calls, in order, until it hangs up (it ended, or died)."""
        with connection:
            while True:
                try:
                    call, arguments = connection.recv()
                    connection.send(self._call(call, arguments))
                except (EOFError, OSError):
                    return

    def _call(self, call: str, arguments: tuple[Any, ...]) -> tuple[str, Any]:
        if call not in CALLS:
            return ("error", f"unknown call {call!r}")
        try:
            with self._writing:
                getattr(self.files, call)(*arguments)
                if call == "write_summary":
                    self.summary = dict(arguments[0])
        except NoSpaceError as full:
            return ("no space", (str(full.path), full.needed))
        except Exception as error:
            return ("error", f"{type(error).__name__}: {error}")
        return ("ok", None)

    def close(self) -> None:
        self._closed = True
        self._listener.close()


class RecordClient:
    """Rank 0's end: RecordFiles' methods, each answered by the owner once it is written."""

    def __init__(self, run_dir: Path, token: str) -> None:
        self.run_dir = Path(run_dir)
        self._token = token
        self._connection: Connection | None = None

    def _connect(self) -> Connection:
        if self._connection is None:
            deadline = time.monotonic() + FIND_S
            while not (address := (lock.holder(self.run_dir) or {}).get(ADDRESS)):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the owner of {self.run_dir} did not publish its record's address"
                    )
                time.sleep(0.1)
            host, port = address.rsplit(":", 1)
            self._connection = Client((host, int(port)), authkey=_key(self._token))
        return self._connection

    def _call(self, call: str, *arguments: Any) -> None:
        connection = self._connect()
        connection.send((call, arguments))
        answer, detail = connection.recv()
        if answer == "no space":
            path, needed = detail
            raise NoSpaceError(Path(path), needed)
        if answer != "ok":
            raise RuntimeError(f"the owner of {self.run_dir} could not write the record: {detail}")

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._call("write_summary", summary)

    def append(self, name: str, record: dict[str, Any]) -> None:
        self._call("append", name, record)

    def truncate(self, after_step: int) -> None:
        self._call("truncate", after_step)


def to_owner(run_dir: Path) -> RecordClient:
    """The channel of a rank the owner started, keyed by the token the owner handed it."""
    return RecordClient(run_dir, os.environ[lock.TOKEN_ENV])
