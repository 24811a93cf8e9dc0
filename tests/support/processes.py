"""Every process a test starts dies with it (a module fixture's, with its module).

Each child starts in a session of its own (its process group is the child and whatever it
forks) and carries a tag in its environment, which every descendant inherits: torchrun's
workers (torchrun starts each one in a session of its own), sweep points, Slurm jobs submitted
by the child (sbatch exports the environment). On a timeout, an error, or at the end of the
test, the child's process group and every process carrying its tag are SIGKILLed, so nothing
it started outlives the test, not even an orphan re-parented to init. A child a module fixture
spawns for the module's tests (`spawn(..., module=True)`) is spared at each test's end and
killed the same way by the fixture's teardown (`end`), or at the session's end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

TAG_VAR = "EXPERIMENTS_TEST_PROCESS"
# This pytest session; a child's tag is "<session>:<n>".
SESSION = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
_issued = 0  # tags handed out so far
_swept = 0  # tags handed out before the last sweep that found nothing left
_spawned: list[tuple[subprocess.Popen, str]] = []
_modules: dict[str, subprocess.Popen] = {}  # tag -> a module fixture's child


def new_tag() -> str:
    global _issued
    _issued += 1
    return f"{SESSION}:{_issued}"


def tagged_pids(tag: str | None = None, sparing: Collection[str] = ()) -> set[int]:
    """Live processes carrying `tag` (or any tag of this session but those `sparing` when
    None)."""
    exact = f"{TAG_VAR}={tag}".encode() if tag else None
    spared = {f"{TAG_VAR}={kept}".encode() for kept in sparing}
    prefix = f"{TAG_VAR}={SESSION}:".encode()
    own = os.getpid()
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()  # empty for a zombie
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item == exact if exact else item.startswith(prefix):
                if item not in spared:
                    found.add(int(entry.name))
                break
    return found


def _signal(action, target: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        action(target, signal.SIGKILL)


def kill(proc: subprocess.Popen | None, tag: str | None, sparing: Collection[str] = ()) -> None:
    """SIGKILL the child's process group (while the child is unreaped its pid cannot be
    reused) and every process carrying `tag` (any tag but those `sparing` when None), with
    the groups they lead; repeat until none is left (a process forked between two scans
    carries the tag too)."""
    if proc is not None and proc.returncode is None:
        _signal(os.killpg, proc.pid)
    for _ in range(200):
        pids = tagged_pids(tag, sparing)
        if not pids:
            break
        for pid in pids:
            try:
                leads_its_group = os.getpgid(pid) == pid
            except ProcessLookupError:
                continue
            _signal(os.killpg if leads_its_group else os.kill, pid)
        time.sleep(0.05)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


def _environment(env: Mapping[str, str] | None, tag: str | None) -> dict[str, str]:
    environment = dict(os.environ if env is None else env)
    environment.pop(TAG_VAR, None)
    if tag:
        environment[TAG_VAR] = tag
    return environment


def _tail(text: str | None, lines: int = 40) -> str:
    return "\n".join((text or "").splitlines()[-lines:])


def run(
    cmd: Sequence[str],
    *,
    timeout: float,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    tagged: bool = True,
) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True) in a new session. On timeout the whole
    tree is killed and the test fails with the output's tail; whatever the child left
    running (an orphan, a worker) is killed when it returns. `tagged=False` for a child whose
    daemons must outlive it (the Slurm cluster): only its process group is killed on timeout."""
    tag = new_tag() if tagged else None
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=_environment(env, tag),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc, tag)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stdout = stderr = "(output not readable: a pipe is still held open)"
        pytest.fail(
            f"{' '.join(map(str, cmd))[:300]}\ndid not finish in {timeout} s; its processes "
            f"were killed.\n--- stdout (tail) ---\n{_tail(stdout)}\n"
            f"--- stderr (tail) ---\n{_tail(stderr)}",
            pytrace=False,
        )
    finally:
        if tagged or proc.returncode is None:
            kill(proc, tag)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, stdout, stderr)


def spawn(
    cmd: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[Any] | int | None = subprocess.DEVNULL,
    stderr: IO[Any] | int | None = subprocess.DEVNULL,
    module: bool = False,
) -> subprocess.Popen:
    """A background child for the test to poke at (kill a rank, requeue its job). Killed,
    with everything it started, when the test ends (conftest), pass or fail; with `module`,
    a module fixture's child for the module's tests, killed by the fixture's teardown
    (`end`). Prefer files over pipes for its output: an unread pipe fills up and blocks the
    child."""
    tag = new_tag()
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=_environment(env, tag),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )
    proc.tag = tag  # type: ignore[attr-defined]
    if module:
        _modules[tag] = proc
    else:
        _spawned.append((proc, tag))
    return proc


def end(proc: subprocess.Popen) -> None:
    """A module fixture's child (spawn(..., module=True)) and all it started, killed."""
    _modules.pop(proc.tag, None)  # type: ignore[attr-defined]
    kill(proc, proc.tag)  # type: ignore[attr-defined]


def kill_spawned_and_leftovers(modules: bool = False) -> None:
    """End of a test: every spawned child's tree, then anything of this session still alive
    (no scan of /proc when no child was started since the last one) but the module fixtures'
    children; with `modules` (the session's end), those too."""
    global _swept
    issued = _issued
    while _spawned:
        proc, tag = _spawned.pop()
        kill(proc, tag)
    while modules and _modules:
        tag, proc = _modules.popitem()
        kill(proc, tag)
    if issued != _swept or modules:
        kill(None, None, sparing=_modules)
        _swept = issued


def torchrun_worker(run_dir: Path, marker: str) -> int:
    """The pid of this run's torchrun worker whose environment holds `marker` (e.g. "RANK=1",
    "GROUP_RANK=1"): a rank a test kills (found through /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            f"hydra.run.dir={run_dir}".encode() in cmdline
            and b"EXPERIMENTS_ROLE=torchrun rank" in environ
            and marker.encode() in environ
        ):
            return int(entry.name)
    raise LookupError(f"no worker with {marker} for {run_dir}")
