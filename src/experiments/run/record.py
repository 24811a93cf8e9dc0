"""The run directory's record: summary.json, metrics.jsonl, TensorBoard events.

Only rank 0 writes. summary.json is replaced atomically (write, fsync, rename), so a reader
or a crash never sees half of it.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
STEPS = "steps.jsonl"
COMMAND_ENV = "EXPERIMENTS_COMMAND"  # the user's command, handed to torchrun workers
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


def write_json_atomic(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2, default=str)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def git_commit(directory: str) -> str | None:
    try:
        commit = subprocess.run(
            ["git", "-C", directory, "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", directory, "status", "--porcelain", "-uno"],
            check=True,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty.strip() else "")


def user_command() -> str:
    """The command the user typed; torchrun workers inherit it from the launching process."""
    if os.environ.get(COMMAND_ENV):
        return os.environ[COMMAND_ENV]
    program = Path(sys.argv[0]).name
    prefix = ["python", "-m", "experiments.train"] if program.endswith(".py") else [program]
    return shlex.join([*prefix, *sys.argv[1:]])


class RunRecorder:
    """Writes the record of one run. Created on every rank; only rank 0 touches the disk."""

    def __init__(
        self,
        run_dir: Path,
        summary: dict[str, Any],
        enabled: bool = True,
        trackers: list[Any] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.enabled = enabled
        self.summary = summary
        # The logger group's trackers (loggers/): every metric recorded here goes to them too.
        self.trackers: list[Any] = list(trackers or []) if enabled else []
        self._started = time.time()

    def start(self) -> None:
        if not self.enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.summary.update(status="running", started_at=_now())
        self._write_summary()

    def log_metrics(self, record: dict[str, Any], tag_prefix: str = "epoch") -> None:
        if not self.enabled:
            return
        append_jsonl(self.run_dir / METRICS, record)
        step = int(record.get("step", 0))
        scalars = _numbers({k: v for k, v in record.items() if k not in ("step", "epoch", "time")})
        self._track({f"{tag_prefix}/{key}": value for key, value in scalars.items()}, step)

    def _track(self, metrics: dict[str, float], step: int) -> None:
        for tracker in [t for t in self.trackers if not t.uses_mmcv_hook]:
            self._call(tracker, "log", metrics, step)

    def _call(self, tracker: Any, method: str, *args: Any) -> None:
        """A tracker that fails is dropped with one warning: it never stops the run."""
        try:
            getattr(tracker, method)(*args)
        except Exception as error:
            import logging

            logging.getLogger(__name__).warning(
                "tracker %s failed in %s (%s); the run goes on without it",
                tracker.name,
                method,
                error,
            )
            self.trackers.remove(tracker)

    def truncate_logs(self, after_step: int) -> None:
        """Keep the records of steps <= after_step (0: a fresh start keeps none)."""
        if not self.enabled:
            return
        for name in (METRICS, STEPS):
            path = self.run_dir / name
            if not path.exists():
                continue
            kept = [
                line
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= after_step
            ]
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
            os.replace(tmp, path)
        for tracker in [t for t in self.trackers if hasattr(t, "truncate")]:
            self._call(tracker, "truncate", after_step)

    def scalar(self, tag: str, value: float, step: int) -> None:
        if self.enabled:
            self._track({tag: value}, step)

    def artifact(self, path: Path) -> None:
        for tracker in list(self.trackers):
            self._call(tracker, "artifact", path)

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
        self._write_summary()
        for tracker in list(self.trackers):
            self._call(tracker, "finish", status, _numbers(metrics or {}))

    def _write_summary(self) -> None:
        write_json_atomic(self.run_dir / SUMMARY, self.summary)


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The entries trackers take: numbers (not bools, lists or strings)."""
    return {
        key: value
        for key, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
