"""`experiments-export RUN_DIR|CHECKPOINT [--out FILE] [--ema|--no-ema]`: a trained model as
one topology-free file to take away, with its JSON sidecar (run/exported.py); what it holds
per family is PARSER's description. The family's exporter does the work
(experiments/families.py); bad input is one line and exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from experiments import tool_cli
from experiments.errors import ConfigError, exit_in_one_line
from experiments.evaluate import find_target
from experiments.families import for_summary

PARSER = tool_cli.parser(
    "experiments-export",
    "Writes a run's newest readable checkpoint (or the one named) as one plain state dict,\n"
    "<run dir>/export/<model>-step<N>.pt unless --out, and its JSON sidecar <file>.json.\n"
    "SNN runs: the whole model. GAN runs: the generator, the EMA one unless --no-ema.\n"
    "Load it without this package:  model.load_state_dict(torch.load(FILE, weights_only=True))",
    [
        "experiments-export outputs/runs/2026-12-06/10-00-00-000000",
        "experiments-export RUN_DIR/checkpoints/step_00000180 --out model.pt",
        "experiments-export GAN_RUN_DIR --no-ema      # the raw generator",
        "experiments-eval model.pt                    # evaluate the exported file",
    ],
    None,  # no readable checkpoint to export is bad input here (exit 2)
)
PARSER.add_argument(
    "target", metavar="RUN_DIR|CHECKPOINT", help="a run directory or a checkpoint in one"
)
PARSER.add_argument(
    "--out", metavar="FILE", help="the file to write (default: <run dir>/export/...)"
)
PARSER.add_argument(
    "--ema",
    action=argparse.BooleanOptionalAction,
    default=None,
    help="GAN runs: the EMA generator (the default where the recipe trains one) or not",
)


def export(argv: list[str]) -> int:
    args = PARSER.parse_args(argv)
    target = find_target(args.target)
    out = Path(args.out).expanduser().resolve() if args.out else None
    family = for_summary(target.summary)
    if family.exporter is None:
        raise ConfigError(
            "run",
            str(target.run_dir),
            f"a run of a family that can export: {family.name} runs cannot be exported yet "
            "(SNN runs can)",
        )
    exporter = importlib.import_module(family.exporter)
    path = exporter.export_run(target.run_dir, target.checkpoint, out, args.ema)
    print(f"Exported {path} (sidecar {path.name}.json)\n  evaluate it: experiments-eval {path}")
    return 0


def main() -> None:
    """An export that cannot be made (a torn checkpoint) is bad input here: exit 2 as well."""
    exit_in_one_line(export, evaluation_exit=ConfigError.exit_code)


if __name__ == "__main__":
    main()
