"""This process is the only rank. Also Ctrl-C at a local sweep (its login and its points).

Ctrl-C reaches the whole process group of a local sweep: its login, the warm worker (which
ignores it) and the running point. The point stops as on SIGTERM (at a step boundary, after
a checkpoint, recorded `interrupted`); the login lets it, starts no further point, writes the
report and says how to continue (callbacks.stop_sweep). A second Ctrl-C stops the login at
once.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import torch

from experiments.launchers.command import run_dir_overrides


def world_size(launcher: dict) -> int:
    return 1


def has_cuda(launcher: dict) -> bool:
    return torch.cuda.is_available()


def command(launcher: dict, overrides: list[str], run_dir: str) -> list[str]:
    return ["experiments-train", *overrides, f"hydra.run.dir={run_dir}"]


def child_command(overrides: list[str], run_dir: str) -> list[str]:
    """One point of a local -m sweep, in a process of its own."""
    return [sys.executable, "-m", "experiments.train", *overrides, *run_dir_overrides(run_dir)]


_ctrl_c = {"count": 0}


def point_stops_on_ctrl_c() -> None:
    """In a point: Ctrl-C is handed to the engine's graceful stop (run/stop.py GracefulStop,
    installed on SIGTERM) when it has one, so the point checkpoints and ends `interrupted`;
    before the engine installed it (or for an engine without one) it is a KeyboardInterrupt
    (train.py records the point `interrupted` too)."""

    def handle(signum: int, frame: Any) -> None:
        graceful = signal.getsignal(signal.SIGTERM)
        if callable(graceful):
            graceful(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handle)


def login_catches_ctrl_c() -> None:
    """In the login of a local sweep: the first Ctrl-C only marks the sweep as stopping (the
    running point stops itself after a checkpoint); the second stops the login at once."""

    def handle(signum: int, frame: Any) -> None:
        _ctrl_c["count"] += 1
        if _ctrl_c["count"] > 1:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        print(
            "\nCtrl-C: the running point stops after its next step, with a checkpoint; no "
            "further point starts (Ctrl-C again stops at once)",
            file=sys.stderr,
            flush=True,
        )

    signal.signal(signal.SIGINT, handle)


def ctrl_c_received() -> bool:
    return _ctrl_c["count"] > 0
