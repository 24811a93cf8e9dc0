"""A run's record changes only when the run itself changes.

Hydra rewrites `<run>/.hydra/config.yaml` on every launch into that directory. Re-running a
completed (or resumable) run directory with a different config would rewrite its record while
reporting "already completed", or resume a checkpoint under other settings. So before Hydra
writes anything, the composed config is compared with the recorded one: a difference is
refused naming the keys, except an explicit extension (more epochs, steps or GAN iterations,
with resume=auto), which continues the run and is recorded in summary.json.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.dotted_keys import flatten
from experiments.errors import ConfigError
from experiments.run import reshard
from experiments.run.record import SUMMARY
from experiments.run.recorded_run import config_path, read_config

# Keys whose raise continues a run instead of changing it.
EXTENSION_KEYS = ("trainer.epochs", "trainer.max_steps", "model.iters")
# Top-level keys that say how to launch, not what the run is.
NOT_THE_RUN = ("hydra", "dry_run", "resume")
# Keys that differ between the launching processes of one run: each torchrun agent of a
# multi-node run (and its restarted workers) names its own node.
PER_NODE = ("launcher.node_rank",)


def check_against_record(cfg: DictConfig, run_dir: Path, resume: Any) -> list[str]:
    """The extensions this launch makes to the recorded run ("key: old -> new"), or [] when
    the config is the recorded one (or there is no record, or resume=null starts over).
    Any other difference is a ConfigError naming the keys."""
    if resume is None or not config_path(run_dir).is_file() or not (run_dir / SUMMARY).is_file():
        return []
    recorded = _flat(OmegaConf.to_container(read_config(run_dir), resolve=False))
    current = _flat(
        {
            k: v
            for k, v in OmegaConf.to_container(cfg, resolve=False, enum_to_str=True).items()
            if k != "hydra"
        }
    )
    changed = sorted(
        key
        for key in set(recorded) | set(current)
        if key.split(".")[0] not in NOT_THE_RUN
        and key not in PER_NODE
        and recorded.get(key) != current.get(key)
    )
    if not changed:
        return []
    extensions = [key for key in changed if key in EXTENSION_KEYS]
    # Another topology or launcher (with the batch keys that keep the global batch) resumes
    # the run's checkpoint resharded; the family decides whether it can (snn/reshard.py).
    topology = [key for key in changed if reshard.is_reshard_key(key)]
    batch = [key for key in changed if key in reshard.BATCH_KEYS] if topology else []
    if (
        resume == "auto"
        and set(extensions) | set(topology) | set(batch) == set(changed)
        and all(_raised(recorded.get(key), current.get(key)) for key in extensions)
    ):
        return [f"{key}: {recorded.get(key)} -> {current.get(key)}" for key in changed]
    key = changed[0]
    raise ConfigError(
        key,
        current.get(key, "<unset>"),
        f"{run_dir} holds a run recorded with {key}={recorded.get(key, '<unset>')!r} "
        f"(keys that differ: {', '.join(changed)}); its record is not rewritten. Use another "
        "hydra.run.dir, resume=null to start it over, or raise only trainer.epochs / "
        "trainer.max_steps / model.iters with resume=auto to extend it (topology.* and "
        "launcher.* may change too: the checkpoint is resharded)",
    )


def _raised(old: Any, new: Any) -> bool:
    def size(value: Any) -> float:
        return math.inf if value is None else float(value)

    try:
        return size(new) > size(old)
    except (TypeError, ValueError):
        return False


def _flat(config: Any) -> dict[str, Any]:
    # an empty record (cut short) is one empty value under the key "", which the refusal names
    return flatten(config) or {"": {}}
