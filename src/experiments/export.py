"""`experiments-export <run dir | checkpoint> [out=FILE] [ema=true|false]`: a trained model
as one topology-free file to take away.

The file is a plain state dict (`torch.load(path, weights_only=True)`) with a JSON sidecar
(`<file>.json`: model config, source run and checkpoint, step, metrics); experiments-eval
accepts it in place of a checkpoint. SNN runs: the single-process model SpikingJelly's builder
makes for the run's ModelConfig, whatever topology trained it. GAN runs: the generator (the
EMA one by default where the recipe trains one) in MMGen's key layout; experiments-sample
accepts it too. The family's exporter does the
work (experiments/families.py); bad input is one line and exit 2, nothing written.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from experiments.errors import ConfigError, exit_in_one_line
from experiments.evaluate import find_target
from experiments.families import for_summary

USAGE = """\
usage: experiments-export <run dir | checkpoint> [out=FILE] [ema=true|false]

Writes the run's newest readable checkpoint (or the one named) as one plain state dict,
<run dir>/export/<model>-step<N>.pt unless out=FILE, and its JSON sidecar <file>.json.
SNN runs: the whole model. GAN runs: the generator, the EMA one unless ema=false.
Load it without this package:  model.load_state_dict(torch.load(FILE, weights_only=True))
Evaluate it:                   experiments-eval FILE   (GAN: experiments-sample FILE too)
"""

KEYS = ("out", "ema")


def export(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    target = find_target(argv[0])
    options: dict[str, str] = {}
    for argument in argv[1:]:
        key, sep, value = argument.partition("=")
        if not sep or key not in KEYS:
            raise ConfigError(argument, None, "out=FILE or ema=true|false")
        options[key] = value
    ema = {"true": True, "false": False, None: None}.get(options.get("ema"), "bad")
    if ema == "bad":
        raise ConfigError("ema", options["ema"], "true or false")
    out = Path(options["out"]).expanduser().resolve() if options.get("out") else None
    family = for_summary(target.summary)
    if family.exporter is None:
        raise ConfigError(
            "run",
            str(target.run_dir),
            f"a run of a family that can export: {family.name} runs cannot be exported yet "
            "(SNN runs can)",
        )
    exporter = importlib.import_module(family.exporter)
    path = exporter.export_run(target.run_dir, target.checkpoint, out, ema)
    print(f"Exported {path} (sidecar {path.name}.json)\n  evaluate it: experiments-eval {path}")
    return 0


def main() -> None:
    """An export that cannot be made (a torn checkpoint) is bad input here: exit 2 as well."""
    exit_in_one_line(export, evaluation_exit=ConfigError.exit_code)


if __name__ == "__main__":
    main()
