"""The points of a local sweep, each in a fork of one warm process.

A cold point pays the interpreter, torch, SpikingJelly, Hydra and our modules again (~4 s
here) before it trains. A warm process imports them once and forks a child per point: the
child starts with everything imported and nothing initialised (no Hydra state, no torch
thread pool, no CUDA context: the warm process never runs an op), runs `experiments-train`'s
entry point with the point's arguments, environment and working directory, and exits. A
child that crashes, is killed or leaks state ends only its point; the warm process reports
its exit status and forks the next one.

Linux and macOS only (fork); `launcher.warm_points=false` runs each point cold.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
from typing import IO, Any

# Set in each forked point to the warm process's pid; the run records it (summary.json).
WARM_WORKER_ENV = "EXPERIMENTS_WARM_WORKER"
# What a point runs, as `experiments-train` does (by name: train.py starts this launcher).
ENTRY_POINT = "experiments.train"
# What every point imports; the family's own modules and the engine's are added per sweep
# (experiments/families.py: `warm_modules`, `engines`).
WARM_MODULES = (
    "torch",
    "hydra",
    "omegaconf",
    "experiments.train",
    "experiments.plan",
    "torch.utils.tensorboard",
    "tqdm",
)


def modules_for(engine: str) -> list[str]:
    """What the warm process of a sweep trained by `engine` imports before it forks."""
    from experiments import families

    family = families.for_engine(engine)
    return [*WARM_MODULES, *family.warm_modules, family.engines.get(engine, "")]


class WarmWorker:
    """The launching side: starts the warm process once, then runs points through it."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        request_read, self._requests = os.pipe()
        self._replies, reply_write = os.pipe()
        modules = modules_for(engine)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.launchers.warm_points",
                str(request_read),
                str(reply_write),
                ",".join(m for m in modules if m),
            ],
            pass_fds=(request_read, reply_write),
        )
        os.close(request_read)
        os.close(reply_write)
        self._reply_file: IO[bytes] = os.fdopen(self._replies, "rb")
        atexit.register(self.close)

    def run(self, argv: list[str], env: dict[str, str], cwd: str) -> int:
        """One point: its exit status, as `subprocess.run(...).returncode` would give it."""
        request = (json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n").encode()
        try:
            while request:  # a pipe may take a large environment in pieces
                request = request[os.write(self._requests, request) :]
            reply = self._reply_file.readline()
        except OSError:
            reply = b""
        if not reply:
            raise RuntimeError(
                f"the warm sweep worker (pid {self.process.pid}) ended "
                f"(status {self.process.poll()}); launcher.warm_points=false runs points cold"
            )
        return int(reply)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        atexit.unregister(self.close)
        if self._requests >= 0:
            with contextlib.suppress(OSError):
                os.close(self._requests)
            self._requests = -1  # never close a descriptor number reused since
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            self.process.kill()
        self._reply_file.close()


_worker: WarmWorker | None = None


def available() -> bool:
    """Forking needs os.fork (Linux, macOS); elsewhere points start cold."""
    return hasattr(os, "fork")


def run_point(engine: str, argv: list[str], env: dict[str, str], cwd: str) -> int:
    """Run one point in a fork of this sweep's warm process (started on first use)."""
    global _worker
    if _worker is None or not _worker.alive() or _worker.engine != engine:
        if _worker is not None:
            _worker.close()
        _worker = WarmWorker(engine)
    return _worker.run(argv, env, cwd)


def _serve(request_fd: int, reply_fd: int, modules: list[str]) -> None:
    """The warm process: import, then fork one child per request line until EOF. Ctrl-C
    reaches the whole process group: the point handles it, this process waits for it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # the point imports it again and reports the failure
            print(f"warm sweep worker: {module} not preloaded ({error})", file=sys.stderr)
    with os.fdopen(request_fd, "rb") as requests, os.fdopen(reply_fd, "wb", buffering=0) as replies:
        for line in requests:
            request = json.loads(line)
            sys.stdout.flush()  # nothing buffered here is printed again by the child
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(request_fd)
                os.close(reply_fd)
                _point(request)  # never returns
            _, status = os.waitpid(pid, 0)
            replies.write(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def _point(request: dict[str, Any]) -> None:
    """In the forked child: become `experiments-train <argv>` and exit with its status."""
    code = 1
    try:
        _die_with_parent()
        if os.getppid() == 1:  # the warm process died between fork and prctl
            os._exit(1)
        # Until the point's own handler (launchers/local.py point_stops_on_ctrl_c) is set.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[WARM_WORKER_ENV] = str(os.getppid())
        os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        importlib.import_module(ENTRY_POINT).main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except KeyboardInterrupt:
        code = 130  # as a shell reports a process ended by Ctrl-C
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _die_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies (a killed sweep leaves no workers)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]), [m for m in sys.argv[3].split(",") if m])
