"""Resuming a run under another topology or world size (issue 28): what every family shares.

recorded_config.py lets `topology.*` and `launcher.*` changes through under resume=auto (with
the batch keys that keep the global batch) as an extension; the family then decides, from
its checkpoint, whether it can resume under the new topology (snn/reshard.py, gan/plan.py's
check_reshard), or refuses it naming why (`refuse`), before anything is launched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

# Config keys whose change is a reshard, not another run.
PREFIXES = ("topology.", "launcher.")
# Changed along with a topology to keep (or, explicitly, change) the global batch.
BATCH_KEYS = (
    "trainer.batch_size",
    "model.batch_size",  # a GAN's per-rank batch
    "trainer.global_batch_size",
    "trainer.allow_global_batch_change",
)


def is_reshard_key(key: str) -> bool:
    return key.startswith(PREFIXES)


def resharded(extensions: list[str]) -> list[str]:
    """The extensions of this launch that change the topology or the launcher."""
    return [e for e in extensions if is_reshard_key(e.split(":", 1)[0])]


def refuse(family: str, extensions: list[str], why: str) -> None:
    """A family or engine that cannot resume another topology's checkpoint."""
    changes = resharded(extensions)
    if changes:
        key, change = changes[0].split(": ", 1)
        raise ConfigError(
            key,
            change.split(" -> ")[-1],
            f"{change.split(' -> ')[0]} as recorded: {family} resumes only under the topology "
            f"that wrote the run ({why}); keep the recorded topology, or use another "
            "hydra.run.dir",
        )


def global_batch_refused(
    key: str,
    value: Any,
    path: Path,
    old: int,
    trained: str,
    continued: str,
    new: int,
    keeps: list[str],
) -> ConfigError:
    """A resume under another topology that would move the global batch (every family):
    the numbers both ways and the overrides that keep it."""
    return ConfigError(
        key,
        value,
        f"a global batch of {old}: {path} trained at {old} ({trained}), and {continued} would "
        f"continue at {new}; keep it with {' or '.join(keeps)}, or set "
        "trainer.allow_global_batch_change=true to change it on purpose",
    )
