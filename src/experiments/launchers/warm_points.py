"""The points of a local sweep, each in a fork of one warm process.

A cold point pays the interpreter, torch, SpikingJelly, Hydra and our modules again (~4 s
here) before it trains. The warm process is the standard library's forkserver: it imports
them once (`set_forkserver_preload`) and forks a child per point, which starts with
everything imported and nothing initialised (no Hydra state, no torch thread pool, no CUDA
context: the server never runs an op), runs `experiments-train`'s entry point with the
point's arguments, environment and working directory, and exits. A child that crashes, is
killed or leaks state ends only its point; its exit status comes back as the Process's.

Linux and macOS only (fork); `launcher.warm_points=false` runs each point cold.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import sys
from multiprocessing import forkserver
from typing import Any

# Set in each forked point to the warm process's pid; the run records it (summary.json).
WARM_WORKER_ENV = "EXPERIMENTS_WARM_WORKER"
# What a point runs, as `experiments-train` does (by name: train.py starts this launcher).
ENTRY_POINT = "experiments.train"
# What every point imports; the family's own modules and the engine's are added per sweep
# (experiments/families.py: `warm_modules`, `engines`).
WARM_MODULES = (
    "experiments",  # first: the collector is lazier while the rest arrive (garbage_collection.py)
    "torch",
    "hydra",
    "omegaconf",
    "experiments.train",
    "experiments.plan",
    "torch.utils.tensorboard",
    "tqdm",
)


def modules_for(engine: str) -> list[str]:
    """What the warm process of a sweep trained by `engine` imports before it forks: also the
    family's `warm_if_planned` libraries that this login has imported. It planned every point
    before the first one starts, so a sweep whose runs use such a library (timm: the paper
    presets' schedules, mixup and augmentations, ~0.8 s on a quiet machine, ~5 s loaded)
    imports it once, not once a point, and a sweep whose plans never touched it pays nothing."""
    from experiments import families

    family = families.for_engine(engine)
    planned = [name for name in family.warm_if_planned if name in sys.modules]
    return [*WARM_MODULES, *family.warm_modules, family.engines.get(engine, ""), *planned]


def available() -> bool:
    """The standard library's forkserver needs os.fork (Linux, macOS); elsewhere points start
    cold."""
    return "forkserver" in multiprocessing.get_all_start_methods()


_server: Any = None  # the forkserver context, its preload set on first use


def run_point(engine: str, argv: list[str], env: dict[str, str], cwd: str) -> int | None:
    """Run one point in a fork of this sweep's warm process (started on first use). Its exit
    status is what `subprocess.run(...).returncode` would give (a signal: minus its number);
    None when the server cannot start it (it died: e.g. a preloaded module raised something
    other than ImportError), and the caller runs the point cold, where its own error is
    reported."""
    global _server
    if _server is None:
        _server = multiprocessing.get_context("forkserver")
        _server.set_forkserver_preload([m for m in modules_for(engine) if m])
        # Started with Ctrl-C ignored (kept across exec; Python keeps an ignored SIGINT):
        # the stdlib server ignores it only once its imports are done, and a Ctrl-C before
        # that would kill it. Each point installs its own handler.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGINT, previous)
    point = _server.Process(
        target=_point, args=({"argv": argv, "env": env, "cwd": cwd},), name="sweep-point"
    )
    try:
        point.start()
    except (EOFError, OSError) as error:
        print(f"warm sweep worker unavailable ({error!r}); this point runs cold", file=sys.stderr)
        return None
    point.join()
    return 1 if point.exitcode is None else int(point.exitcode)


def _point(request: dict[str, Any]) -> None:
    """In the forked child: become `experiments-train <argv>` and exit with its status."""
    code = 1
    try:
        # The server ends when the sweep's login does (its "alive" pipe closes) and then
        # this point with it (_die_with_parent): unless the point holds a copy of that pipe,
        # which the stdlib hands every child.
        with contextlib.suppress(OSError, TypeError):
            os.close(forkserver._forkserver._forkserver_alive_fd)
        _die_with_parent()
        if os.getppid() == 1:  # the warm process died between fork and prctl
            os._exit(1)
        # DataLoader workers of this point start as a cold run's do (the platform's default
        # method, fork on Linux), not by the forkserver this process was started from.
        multiprocessing.set_start_method(None, force=True)
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
