"""The Slurm launcher's config resolvers (`${experiments.null_if_zero:...}`,
`${experiments.slurm_setup:...}` in conf/launcher/slurm.yaml and conf/hydra/launcher/).
Registered by `import experiments` (they must exist before Hydra composes), so this module is
light (no torch) and imports nothing of the package: `import experiments` stays below every
module that imports it."""

from __future__ import annotations


def null_if_zero(value: object) -> object:
    # sbatch must not see --gpus-per-node=0 on a CPU partition: unset means "no GPUs".
    return None if value in (0, "0", None) else value


# Before the user's own setup lines in every sbatch script: when one task of a job exits
# with an error or is killed, Slurm ends the job's other tasks (srun --kill-on-bad-exit)
# instead of leaving them waiting for it in a collective.
SLURM_SETUP = ["export SLURM_KILL_BAD_EXIT=1"]


def slurm_setup_lines(user: object) -> list:
    return [*SLURM_SETUP, *(list(user) if user else [])]
