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
    return [f"hydra.run.dir={run_dir}", "hydra.output_subdir=null", "hydra.mode=RUN"]
