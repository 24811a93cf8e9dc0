"""This process is the only rank."""

from __future__ import annotations

import sys

import torch

from experiments.errors import ConfigError
from experiments.launchers.child import run_dir_overrides


def world_size(launcher: dict) -> int:
    return 1


def has_cuda(launcher: dict) -> bool:
    return torch.cuda.is_available()


def validate(launcher: dict) -> None:
    warm = launcher.get("warm_points", False)
    if not isinstance(warm, bool):
        raise ConfigError("launcher.warm_points", warm, "true or false")


def command(launcher: dict, overrides: list[str], run_dir: str) -> list[str]:
    return ["experiments-train", *overrides, f"hydra.run.dir={run_dir}"]


def child_command(overrides: list[str], run_dir: str) -> list[str]:
    """One point of a local -m sweep, in a process of its own."""
    return [sys.executable, "-m", "experiments.train", *overrides, *run_dir_overrides(run_dir)]
