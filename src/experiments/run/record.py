"""The run directory's record: summary.json, metrics.jsonl and steps.jsonl, and every record
handed on to the selected loggers (TensorBoard events, CSV, MLflow, W&B: loggers/).

The record has one writer, the run's owner (role.py): `RecordFiles`, in its own process or
behind the channel torchrun's rank 0 reports through (run/channel.py). Every file of ours is
written by `atomically` (write, fsync, rename: a reader or a crash never sees half of it);
a log line is appended whole or not at all. A write that fails for lack of space (a full
disk, a quota) leaves the previous file as it was (an append is cut back to where it
started) and raises NoSpaceError: one line naming the path and the bytes it needed, which
the run prints as its failure. `read_records` is the one reader of a run directory's
records for the report (and the status command): a truncated or invalid file is that run's
problem, never a crash.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
STEPS = "steps.jsonl"
# The layout of summary.json and the logs. Raised only when a reader of an older layout would
# misread a newer one: a run directory of a newer format is refused (resume) or reported (the
# report) naming the package version that wrote it; older ones are read.
RECORD_FORMAT = 1
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
PACKAGES = (
    "experiments",
    "torch",
    "torchvision",
    "spikingjelly",
    "hydra-core",
    "omegaconf",
    "submitit",
    "hydra-submitit-launcher",
    "mmcv-full",
    "mmgen",
)


class NoSpaceError(OSError):
    """A write failed for lack of space or quota. The file it was writing is as before (a
    temporary removed, an append cut back), so the previous checkpoint and records stand."""

    def __init__(
        self, path: Path, needed: int | None, cause: OSError | None = None, at_least: bool = False
    ) -> None:
        self.path = Path(path)
        self.needed = needed
        self.free = free_bytes(self.path.parent)
        what = (
            "quota exceeded"
            if cause is not None and cause.errno == errno.EDQUOT
            else ("no space left on device")
        )
        need = f"it needed {'at least ' if at_least else ''}{_bytes(needed)}"
        if needed is None:
            need = "size unknown"
        super().__init__(
            cause.errno if cause is not None else errno.ENOSPC,
            f"{what} writing {self.path} ({need}, {_bytes(self.free)} free there); the "
            "previous checkpoint and records are intact: free space (or raise the quota), then "
            "resume the run",
        )

    def __str__(self) -> str:
        return str(self.strerror)


def free_bytes(directory: Path) -> int | None:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def _bytes(count: int | None) -> str:
    if count is None:
        return "unknown"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= size:
            return f"{count} bytes = {count / size:.1f} {unit}"
    return f"{count} bytes"


def no_space(error: BaseException) -> NoSpaceError | None:
    """The NoSpaceError behind `error`, or one made from an ENOSPC/EDQUOT OSError in its
    chain (a library's own write: MMGen's log, torch's DCP writer); None if it is not one."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, NoSpaceError):
            return current
        if isinstance(current, OSError) and current.errno in NO_SPACE:
            return NoSpaceError(Path(current.filename or "."), None, current)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        pending += [a for a in getattr(current, "args", ()) if isinstance(a, BaseException)]
        failures = getattr(current, "failures", None)  # torch DCP's CheckpointException
        if isinstance(failures, dict):
            for value in failures.values():
                pending += [
                    v
                    for v in (value if isinstance(value, tuple) else (value,))
                    if isinstance(v, BaseException)
                ]
    return None


def write_bytes_atomic(path: Path, data: bytes | memoryview) -> None:
    """`data` as the whole of `path` (`atomically`). On a full disk or quota NoSpaceError says
    how much was needed: `path` is untouched and the temporary gone (its space given back)."""
    path = Path(path)
    with atomically(path) as temporary:
        try:
            temporary.write_bytes(data)
        except OSError as error:
            if error.errno in NO_SPACE:
                raise NoSpaceError(path, len(data), error) from None
            raise


@contextlib.contextmanager
def atomically(path: Path, temporary: Path | None = None, fsync: bool = True) -> Iterator[Path]:
    """The one way a file of ours is written whole or not at all: a temporary beside `path`
    (`.<name>.tmp` unless named) for the block to write the whole file at, itself or through
    a library that writes by name (savefig, PIL, numpy, torch.save, mmcv's save_checkpoint);
    then fsync (unless `fsync` is False) and rename over `path`, so a reader never sees half
    of it. On any failure the temporary is removed and `path` is as before; one for lack of
    space or quota is NoSpaceError (at least the bytes written)."""
    path = Path(path)
    tmp = Path(temporary) if temporary is not None else path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        try:
            written: int | None = tmp.stat().st_size or None
        except OSError:
            written = None
        tmp.unlink(missing_ok=True)
        ours = isinstance(error, NoSpaceError)  # raised in the block: it names its file
        if isinstance(error, OSError) and error.errno in NO_SPACE and not ours:
            raise NoSpaceError(path, written, error, at_least=True) from None
        raise


def write_json_atomic(path: Path, value: Any) -> None:
    text = json.dumps(value, indent=2, default=str) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))


class _Counter(io.RawIOBase):
    """A sink that only counts: the size torch.save needs, measured without a disk."""

    def __init__(self) -> None:
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.size += len(data)
        return len(data)


def write_torch_atomic(state: Any, path: Path) -> None:
    """torch.save, `atomically`. On a full disk or quota NoSpaceError names the bytes the
    whole file needs (serialised again into a counter: torch reports only an iostream error,
    once the partial copy is gone)."""
    import torch

    path = Path(path)
    with atomically(path) as temporary:
        try:
            with open(temporary, "wb") as handle:  # ours, so it is closed however torch fails
                torch.save(state, handle)
        except (OSError, RuntimeError) as error:
            cause = no_space(error)
            if cause is None and not isinstance(error, RuntimeError):
                raise
            temporary.unlink(missing_ok=True)  # its space given back before it is measured
            counter = _Counter()
            torch.save(state, counter)
            free = free_bytes(path.parent)
            # torch's writer may hide the errno: out of space if the whole file cannot fit
            # in what is free now that its partial copy is gone.
            if cause is None and (free is None or counter.size <= free):
                raise
            errno_cause = error if isinstance(error, OSError) else None
            raise NoSpaceError(path, counter.size, errno_cause) from None


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """One line, appended whole or not at all: a write cut short by a full disk is cut back
    to the file's previous end, so the log never holds half a line of ours."""
    data = (json.dumps(record) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as error:
            os.ftruncate(fd, start)
            if error.errno in NO_SPACE:
                raise NoSpaceError(Path(path), len(data), error) from None
            raise
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """A log's records, and the problem with it (None if whole): lines that are not a JSON
    object are skipped and counted; a missing file is no records and no problem."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return [], None
    except OSError as error:
        return [], f"{Path(path).name} unreadable ({error.strerror or error})"
    records: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            bad.append(number)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(number)
    if not bad:
        return records, None
    where = f"line {bad[0]}" if len(bad) == 1 else f"{len(bad)} lines (first: line {bad[0]})"
    return records, f"{Path(path).name}: {where} not a JSON record (cut short?); skipped"


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object's file; None where it is missing, unreadable or not an object."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    return read_json(run_dir / SUMMARY)


def read_records(run_dir: Path, logs: bool = True) -> dict[str, Any]:
    """What a run directory's records say, for the report and the status command:
    `summary` (None when missing or unreadable), `problems` (one short line each: a
    truncated or invalid summary.json / metrics.jsonl / steps.jsonl, a record format newer
    than this package's) and, with `logs`, the parsed `metrics` and `steps` records."""
    run_dir = Path(run_dir)
    problems: list[str] = []
    summary: dict[str, Any] | None = None
    try:
        text = (run_dir / SUMMARY).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = None
    except OSError as error:
        text = None
        problems.append(f"{SUMMARY} unreadable ({error.strerror or error})")
    if text is not None:
        try:
            parsed = json.loads(text)
        except ValueError as error:
            parsed = None
            cut = (
                "empty" if not text.strip() else f"invalid JSON at byte {error.pos} of {len(text)}"
            )
            problems.append(f"{SUMMARY} {cut} (cut short?); resume=auto rebuilds it")
        if parsed is not None and not isinstance(parsed, dict):
            problems.append(f"{SUMMARY} is not a JSON object; resume=auto rebuilds it")
        elif parsed is not None:
            summary = parsed
            foreign = foreign_format(summary)
            if foreign:
                problems.append(foreign)
    found: dict[str, Any] = {"summary": summary, "problems": problems}
    if logs:
        for key, name in (("metrics", METRICS), ("steps", STEPS)):
            records, problem = read_jsonl(run_dir / name)
            found[key] = records
            if problem:
                problems.append(problem)
    return found


def foreign_format(summary: dict[str, Any]) -> str | None:
    """One line when `summary` was written in a record format this package cannot read
    (a newer one), naming the package version that wrote it; None when it can be read."""
    written = summary.get("record_format", 1)
    if isinstance(written, int) and written <= RECORD_FORMAT:
        return None
    version = (summary.get("versions") or {}).get("experiments", "an unknown version")
    from experiments import __version__

    return (
        f"written by experiments {version} (record format {written}); experiments "
        f"{__version__} reads format {RECORD_FORMAT} and older: read it with that version"
    )


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def git(cwd: str | Path, *args: str, timeout: float) -> str | None:
    """git's output, or None where git is missing, fails or runs past timeout."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_commit(directory: str) -> str | None:
    commit = git(directory, "rev-parse", "HEAD", timeout=5)
    dirty = None if commit is None else git(directory, "status", "--porcelain", "-uno", timeout=5)
    if dirty is None:
        return None
    return commit.strip() + ("-dirty" if dirty.strip() else "")


class RecordFiles:
    """summary.json, metrics.jsonl and steps.jsonl of one run directory, written by the run's
    owner alone (role.py): in its own process, or for the ranks torchrun started for it, as
    they report over its channel (run/channel.py)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.run_dir / SUMMARY, summary)

    def append(self, name: str, record: dict[str, Any]) -> None:
        """One record of metrics.jsonl or steps.jsonl."""
        append_jsonl(self.run_dir / name, record)

    def truncate(self, after_step: int) -> None:
        """Keep the records of steps <= after_step (0: a fresh start keeps none). A line cut
        short by a crash or a full disk is dropped here: the resumed run's logs are whole."""
        for name in (METRICS, STEPS):
            path = self.run_dir / name
            if not path.exists():
                continue
            kept, broken = [], 0
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    record = json.loads(line) if line.strip() else None
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    broken += bool(line.strip())
                    continue
                if _step_of(record) <= after_step:
                    kept.append(line)
            if broken:
                log.warning("%s: %d line(s) cut short or invalid, dropped on resume", path, broken)
            write_bytes_atomic(path, "".join(f"{line}\n" for line in kept).encode("utf-8"))


class RunRecorder:
    """The record of one run as the rank that trains it keeps it: its summary, its metrics and
    steps (written through `files`, the owner's RecordFiles or the channel to it), and every
    record handed on to the selected loggers. Created on every rank; only the rank whose
    record reaches the run directory (`enabled`: rank 0) records anything."""

    def __init__(
        self,
        run_dir: Path,
        summary: dict[str, Any],
        enabled: bool = True,
        loggers: list[Any] | None = None,
        files: Any = None,
    ) -> None:
        self.run_dir = run_dir
        self.enabled = enabled
        self.summary = summary
        self.files = files if files is not None else RecordFiles(run_dir)
        # The logger group's loggers (loggers/): every metric recorded here goes to them too.
        self.loggers: list[Any] = list(loggers or []) if enabled else []
        self._started = time.time()

    def start(self) -> None:
        if not self.enabled:
            return
        self.summary.update(status="running", started_at=_now(), record_format=RECORD_FORMAT)
        self.files.write_summary(self.summary)

    def log_metrics(self, record: dict[str, Any], tag_prefix: str = "epoch") -> None:
        if not self.enabled:
            return
        self.files.append(METRICS, record)
        step = int(record.get("step", 0))
        scalars = _numbers({k: v for k, v in record.items() if k not in ("step", "epoch", "time")})
        self._track({f"{tag_prefix}/{key}": value for key, value in scalars.items()}, step)

    def log_step(self, record: dict[str, Any]) -> None:
        """One optimizer step's record (steps.jsonl); its loss goes to the loggers too."""
        if not self.enabled:
            return
        self.files.append(STEPS, record)
        self._track({"train/loss": record["loss"]}, int(record["step"]))

    def _track(self, metrics: dict[str, float], step: int) -> None:
        for logger in [t for t in self.loggers if not t.uses_mmcv_hook]:
            self._call(logger, "log", metrics, step)

    def _call(self, logger: Any, method: str, *args: Any) -> None:
        """A logger that fails is dropped with one warning: it never stops the run."""
        try:
            getattr(logger, method)(*args)
        except Exception as error:
            log.warning(
                "logger %s failed in %s (%s); the run goes on without it",
                logger.name,
                method,
                error,
            )
            self.loggers.remove(logger)

    def truncate_logs(self, after_step: int) -> None:
        """The records (and the loggers' own) back to step `after_step` (see
        RecordFiles.truncate)."""
        if not self.enabled:
            return
        self.files.truncate(after_step)
        for logger in [t for t in self.loggers if hasattr(t, "truncate")]:
            self._call(logger, "truncate", after_step)

    def scalars(self, metrics: dict[str, float], step: int) -> None:
        if self.enabled:
            self._track(metrics, step)

    def histogram(self, tag: str, values: list[float], step: int) -> None:
        """A distribution, to the loggers that draw one (TensorBoard); the others get its
        values as scalars from the caller already."""
        for logger in [t for t in self.loggers if hasattr(t, "histogram")]:
            self._call(logger, "histogram", tag, values, step)

    def artifact(self, path: Path) -> None:
        for logger in list(self.loggers):
            self._call(logger, "artifact", path)

    def finish(
        self,
        status: str,
        metrics: dict[str, Any] | None = None,
        error: str | None = None,
        **extra: Any,
    ) -> None:
        if not self.enabled:
            return
        self.summary.update(
            status=status,
            finished_at=_now(),
            wall_time_s=round(time.time() - self._started, 2),
            **extra,
        )
        if metrics is not None:
            self.summary["metrics"] = metrics
        if error is not None:
            self.summary["error"] = error
        self.files.write_summary(self.summary)
        for logger in list(self.loggers):
            self._call(logger, "finish", status, _numbers(metrics or {}))


def _step_of(record: dict[str, Any]) -> float:
    step = record.get("step", 0)
    return step if isinstance(step, (int, float)) else 0


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The entries loggers take: numbers (not bools, lists or strings)."""
    return {
        key: value
        for key, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
