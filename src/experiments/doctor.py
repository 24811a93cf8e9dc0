"""`experiments-doctor [overrides]`: the environment checks alone, for the run those overrides
compose (the same command line as experiments-train: groups, keys, `--config-dir`, `-m`).
What a user runs first on a new cluster: a table of each check, ok or what is missing and the
command that fixes it; exit 0 when all pass, 1 when one fails, 2 for a config that is refused.
It is `experiments-train ... dry_run=doctor`: nothing is trained, submitted or written."""

from __future__ import annotations

import sys

USAGE = """\
usage: experiments-doctor [KEY=VALUE ...] [--config-dir DIR]

Checks the environment the run's ranks will meet (preflight.py), for the config the same
overrides give experiments-train: the neuron kernel, NCCL and GPUs on CUDA, mmcv-full's ops,
the data root, free space for the checkpoints; nothing is written.

examples:
  experiments-doctor experiment=digits_sew_resnet18
  experiments-doctor model=spikformer data=imagefolder data.root=/data/imagenet \
      launcher=torchrun launcher.nproc_per_node=4 topology=ddp
  experiments-doctor model.neuron_implementation=triton     # refused without CUDA (exit 2)

exit status:
  0  every check passed
  1  a check failed (the table says what is missing and how to fix it)
  2  the config is refused before any check (one line naming the key)
"""


def main() -> None:
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(USAGE, end="")
        return
    from experiments import train

    sys.argv = ["experiments-train", *args, "dry_run=doctor"]
    train.main()
