"""`experiments-eval RUN_DIR|CHECKPOINT [KEY=VALUE ...]`: evaluate a run's checkpoint.

The run directory is the record: its `.hydra/config.yaml` rebuilds the model exactly as it
was trained, and `summary.json` says which family (and engine) wrote it. This module only
finds the run and the checkpoint and hands them to the family's evaluation
(the family's `evaluator` module, experiments/families.py); bad input is one line and exit 2,
like the training command.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from experiments import tool_cli
from experiments.errors import ConfigError, exit_in_one_line
from experiments.families import for_summary
from experiments.run.exported import is_exported, read_sidecar
from experiments.run.record import read_summary
from experiments.run.recorded_run import config_path

PARSER = tool_cli.parser(
    "experiments-eval",
    "Evaluates a run's checkpoint (the newest readable one for a run directory) on the run's\n"
    "own validation data (SNN) or data (GAN) and writes <run dir>/eval.json (SNN runs also\n"
    "eval_confusion.png and the run's spike and energy measurement).\n\n"
    "KEY=VALUE overrides, as experiments-train takes them:\n"
    "  SNN runs:  data.<key>=<value> (other data, e.g. data.val_size=...), trainer.batch_size=N,\n"
    "             trainer.workers=N\n"
    "  GAN runs:  data=<option>, data.<key>=<value>, model.eval_images=N, seed=N\n"
    "             (SWD and MS-SSIM as training computes them; EMA models on the EMA generator)",
    [
        "experiments-eval outputs/runs/2026-12-06/10-00-00-000000",
        "experiments-eval RUN_DIR/checkpoints/step_00000120",
        "experiments-eval RUN_DIR data.val_size=512",
        "experiments-eval model.pt                  # a file experiments-export wrote",
    ],
    "none of the run's checkpoints is readable",
)
PARSER.add_argument(
    "target",
    metavar="RUN_DIR|CHECKPOINT",
    help="a run directory, a checkpoint in one, or an exported file",
)
PARSER.add_argument(
    "overrides", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides"
)


@dataclass(frozen=True)
class Target:
    """What the user pointed at: a run directory, and a checkpoint in it or None (newest)."""

    run_dir: Path
    checkpoint: Path | None
    summary: dict


def find_target(argument: str) -> Target:
    """A run directory holds summary.json; a checkpoint lies somewhere below one (SNN:
    checkpoints/step_N/, classic Trainer: checkpoints/*.pth, MMGen: ckpt/<name>/iter_N.pth)."""
    path = Path(argument).expanduser()
    if not path.exists():
        raise ConfigError("run", argument, "an existing run directory or checkpoint path")
    path = path.resolve()
    if is_exported(path):  # experiments-export's file: its sidecar names the run
        run_dir = Path(read_sidecar(path)["run_dir"])
        summary = _run_summary(run_dir)
        if summary is None:
            raise ConfigError(
                "run",
                argument,
                f"an export whose run is still there: its sidecar names {run_dir}, which is "
                "not a run directory (anymore)",
            )
        return Target(run_dir, path, summary)
    for candidate in (path, *path.parents):
        summary = _run_summary(candidate)
        if summary is not None:
            return Target(candidate, None if candidate == path else path, summary)
    raise ConfigError(
        "run",
        argument,
        "a run directory made by experiments-train (with summary.json and .hydra/config.yaml),"
        " or a checkpoint inside one",
    )


def _run_summary(directory: Path) -> dict | None:
    """The summary of a run directory experiments-train made (summary.json and its recorded
    config), else None."""
    summary = read_summary(directory)
    return summary if summary is not None and config_path(directory).is_file() else None


def parse_overrides(arguments: list[str]) -> list[str]:
    for argument in arguments:
        key, sep, _ = argument.partition("=")
        if not sep or not key:
            PARSER.error(f"{argument!r} is not KEY=VALUE (e.g. data.val_size=128)")
    return arguments


def evaluate(argv: list[str]) -> int:
    args = PARSER.parse_args(argv)
    target = find_target(args.target)
    overrides = parse_overrides(args.overrides)
    family = for_summary(target.summary)
    if family.evaluator is None:
        raise ConfigError(
            "run",
            str(target.run_dir),
            f"a run of a family with an evaluator ({family.name} has none)",
        )
    evaluator = importlib.import_module(family.evaluator)
    return evaluator.evaluate_run(target.run_dir, target.checkpoint, overrides)


def main() -> None:
    exit_in_one_line(evaluate)
