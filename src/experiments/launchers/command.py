"""The command line of a run: what the user typed, the command that continues the run, and
what makes a child process (a torchrun rank, a local sweep's point) one run of its directory.
The launchers know the command line; the record (run/summary.py) is handed what it says."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from experiments.role import Kind, Role

COMMAND_ENV = "EXPERIMENTS_COMMAND"  # the user's command, handed to the children of a run


def user_command() -> str:
    """The command the user typed; a run's children inherit it from the launching process."""
    if os.environ.get(COMMAND_ENV):
        return os.environ[COMMAND_ENV]
    program = Path(sys.argv[0]).name
    prefix = ["python", "-m", "experiments.train"] if program.endswith(".py") else [program]
    return shlex.join([*prefix, *sys.argv[1:]])


def swept(command: str) -> bool:
    """Whether the user's command is a sweep (-m/--multirun, or hydra.mode=MULTIRUN typed).
    launcher=slurm submits a plain command as a one-point sweep (hydra.mode is MULTIRUN in
    conf/launcher/slurm.yaml): its messages must not speak of "sweep point 0"."""
    words = shlex.split(command)
    arguments = words[3:] if words[:3] == ["python", "-m", "experiments.train"] else words[1:]
    return any(
        word in ("-m", "--multirun") or word.replace(" ", "") == "hydra.mode=MULTIRUN"
        for word in arguments
    )


def resume_command(role: Role, run_dir: Path) -> str:
    """The command that continues the run. A sweep point's or a Slurm job's: the same command
    (the sweep directory is named after it). A single run's: the user's command with
    `hydra.run.dir=<run_dir>` in place of any run directory it named; its directory is
    timestamped (conf/hydra/default.yaml), so the same command alone would start over in a new
    one, and naming the directory keeps every override as typed and resumes in place."""
    command = user_command()
    if swept(command) or role.kind in (Kind.SWEEP_POINT, Kind.SLURM_TASK):
        return command
    words = [w for w in shlex.split(command) if not w.startswith("hydra.run.dir=")]
    return shlex.join([*words, run_dir_overrides(str(run_dir))[0]])


def run_dir_overrides(run_dir: str) -> list[str]:
    """What makes a child process one run of `run_dir`: that directory (quoted, so a path with
    `,` `=` or spaces is not read as Hydra syntax), no .hydra/ rewrite (the launching process
    wrote it), and run mode even when the config sets hydra.mode=MULTIRUN (a search preset):
    a child must never start a sweep of its own."""
    if re.search(r"[^A-Za-z0-9._/+@:%-]", run_dir):
        run_dir = "'" + run_dir.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return [
        f"hydra.run.dir={run_dir}",
        "hydra.output_subdir=null",
        "hydra.mode=RUN",
        *config_dir_args(),
    ]


def config_dir_args() -> list[str]:
    """`--config-dir DIR` when the user's own configs came from one (Hydra's flag: a user's
    `experiment/mine.yaml` needs no reinstall of this package), so the child composes the
    same run. Last on the command line: argparse reads it after Hydra's overrides."""
    try:
        from hydra.core.hydra_config import HydraConfig

        sources = HydraConfig.get().runtime.config_sources
    except (ImportError, ValueError):  # planned outside a Hydra job (tests, the tools)
        return []
    for source in sources:
        if source.provider == "command-line" and source.schema == "file":
            return ["--config-dir", source.path]
    return []
