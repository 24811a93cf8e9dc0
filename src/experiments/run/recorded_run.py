"""A finished run as later commands read it: the config Hydra composed and recorded
(`<run>/.hydra/config.yaml`) and the option of each config group it was composed from
(`hydra.runtime.choices` in `<run>/.hydra/hydra.yaml`).

Why one reader: evaluate (SNN and GAN), sample and resume all read a recorded run, and they
must read it the same way: an evaluation or a sample rebuilds the model that was trained, and
a resume compares its launch with the config that was recorded. What an evaluation may change
is the family's rule (snn/evaluate.py, gan/evaluate.py); this module reads the record, reads
an override's value, and turns the recorded config into one local process's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.known_keys import option_file

CONFIG = Path(".hydra") / "config.yaml"
HYDRA = Path(".hydra") / "hydra.yaml"
# The options an evaluation or a sample runs with: one process, on this machine.
ONE_LOCAL_PROCESS = {"launcher": "local", "topology": "single"}


def config_path(run_dir: Path) -> Path:
    return Path(run_dir) / CONFIG


def read_config(run_dir: Path) -> DictConfig:
    """The config the run recorded, unresolved."""
    cfg = OmegaConf.load(config_path(run_dir))
    assert isinstance(cfg, DictConfig)
    return cfg


def read_choices(run_dir: Path, missing_ok: bool = False) -> dict[str, str]:
    """Each config group's option the run was composed from ({"model": ..., "data": ...});
    with `missing_ok`, {} for a run without hydra.yaml."""
    path = Path(run_dir) / HYDRA
    if missing_ok and not path.is_file():
        return {}
    hydra = OmegaConf.load(path)
    return dict(OmegaConf.select(hydra, "hydra.runtime.choices", default={}) or {})


def override_value(text: str) -> Any:
    """The value of a `key=value` override, read as YAML (`3`, `true`, `[a, b]`); none: null."""
    return yaml.safe_load(text) if text else None


def set_one_local_process(cfg: DictConfig, cleared: tuple[str, ...]) -> None:
    """In place: the recorded config on one local process (ONE_LOCAL_PROCESS's launcher and
    topology), its `cleared` keys null (nothing of the run is resumed or rewritten), not a
    dry run."""
    with open_dict(cfg):
        for group, option in ONE_LOCAL_PROCESS.items():
            cfg[group] = OmegaConf.load(option_file(group, option))
        for key in cleared:
            cfg[key] = None
        cfg.dry_run = False
