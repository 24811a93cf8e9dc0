"""What every family's plan shares: the composed config read as plain values, the overrides a
launched process repeats, how a dry run shows a command, and the points a sweep expands to
(read before the sweep starts by callbacks.py, and from its multirun.yaml by the report).

Kept apart from `plan.py` (which picks the family) so the family plans (`snn/plan.py`,
`gan/plan.py`) import it without importing each other.
"""

from __future__ import annotations

import copy
import shlex
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.errors import ConfigError


def launch_lines(launcher: str, command: list[str]) -> list[str]:
    """A dry run's view of the command: an sbatch script line by line, else one shell line."""
    if launcher == "slurm":
        return [f"    {line}" for line in command]
    return [f"    {shlex.join(command)}"]


# What a dry run shows for a preset's data.root that is still `???` (e.g. an ImageNet recipe):
# the plan is visible, and the placeholder says what a real run needs.
ROOT_PLACEHOLDER = "<required: set data.root=... before a real run>"


def _placeholder_root_for_dry_run(cfg: DictConfig) -> DictConfig:
    if not cfg.get("dry_run") or "data" not in cfg or not OmegaConf.is_missing(cfg.data, "root"):
        return cfg
    return _with_data_value(cfg, "root", ROOT_PLACEHOLDER)


def _with_data_value(cfg: DictConfig, key: str, value: Any) -> DictConfig:
    """A copy of the composed config with one data key filled in (the caller's stays as is)."""
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.data[key] = value
    return cfg


def user_overrides(overrides: list[str]) -> list[str]:
    """The overrides a launched process repeats: not the dry run, not the run directory."""
    return [o for o in overrides if not o.startswith(("dry_run=", "hydra.run.dir="))]


def plain(node: Any) -> Any:
    """A config node as plain data, resolved (a typed choice as its name: schemas/); anything
    else as it is."""
    if not OmegaConf.is_config(node):
        return node
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)


def _resolve(cfg: DictConfig) -> dict[str, Any]:
    """The job's keys, resolved (the hydra node has run-time values we do not need)."""
    values: dict[str, Any] = {}
    for key in cfg:
        if key == "hydra":
            continue
        try:
            node = cfg[key]
            values[str(key)] = (
                OmegaConf.to_container(node, resolve=True, throw_on_missing=True, enum_to_str=True)
                if OmegaConf.is_config(node)
                else node
            )
        except Exception as error:  # an interpolation that cannot resolve, e.g. a missing value
            raise ConfigError(
                _error_key(error, key), "???", f"must be set ({_first_line(error)})"
            ) from None
    return values


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]


def _error_key(error: Exception, fallback: object) -> str:
    key = getattr(error, "full_key", None)
    return str(key) if key else str(fallback)


def sweep_points(config: Any) -> list[list[str]] | None:
    """The override lists of every point of a basic-sweeper sweep, expanded as the sweeper
    will expand them; None for other sweepers (they choose points while they run)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = config.hydra.sweeper
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    return [point for batch in BasicSweeper.split_arguments(parsed, None) for point in batch]
