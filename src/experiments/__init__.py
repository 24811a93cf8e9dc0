"""Compose, validate, launch and record SpikingJelly and MMGeneration runs."""

# First, before this process imports torch and the rest: the collector is lazier while it
# starts, until an engine's library loop starts (garbage_collection.py).
from experiments import garbage_collection

garbage_collection.defer_while_starting()

from omegaconf import OmegaConf  # noqa: E402

from experiments import resolvers  # noqa: E402

__version__ = "0.1.0"


def _log_name(job_name: str) -> str:
    from experiments import role

    return role.of_process().log_name(job_name)


def _sweep_id() -> str:
    """Name of a sweep's directory, derived from its command line: re-running the same sweep
    finds its earlier points (completed ones are skipped, interrupted ones resume). The order
    of the overrides, `dry_run` and a search's budget (`hydra.sweeper.n_trials`) do not count:
    a dry run previews the real run's directory, and a larger budget continues the same study."""
    import hashlib
    import re
    import sys

    argv, flags = sys.argv[1:], []
    for flag in ("--config-dir", "-cd"):  # a folder of the user's configs: in the hash only
        while flag in argv[:-1]:
            at = argv.index(flag)
            flags += argv[at : at + 2]
            argv = argv[:at] + argv[at + 2 :]
    words = sorted(
        a
        for a in argv
        if a not in ("-m", "--multirun")
        and not a.startswith(
            ("hydra.sweep.", "hydra/launcher", "dry_run=", "hydra.sweeper.n_trials=")
        )
    )
    digest = hashlib.sha1("\0".join([*words, *flags]).encode()).hexdigest()[:8]
    # Only characters that need no quoting in a path or in a Hydra override.
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", "_".join(words))[:60].strip("_")
    return f"{slug}-{digest}" if slug else digest


OmegaConf.register_new_resolver("experiments.sweep_id", _sweep_id, use_cache=True, replace=True)
OmegaConf.register_new_resolver("experiments.null_if_zero", resolvers.null_if_zero, replace=True)
OmegaConf.register_new_resolver("experiments.log_name", _log_name, replace=True)
OmegaConf.register_new_resolver(
    "experiments.slurm_setup", resolvers.slurm_setup_lines, replace=True
)
