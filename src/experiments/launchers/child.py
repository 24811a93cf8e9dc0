"""Command-line pieces every child process of a run gets (torchrun ranks, sweep points)."""

from __future__ import annotations

import re


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
