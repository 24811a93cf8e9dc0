"""Typed configs: a dataclass for each config node whose keys are ours.

- Each option's yaml names its schema first in its defaults list
  (`- /topology_schema@_here_`), and Hydra merges the yaml and the command line onto the
  dataclass: OmegaConf refuses a value of the wrong type, a choice outside an enum and a key
  the dataclass has not while composing (composition_errors.py words that in one line).
- What a value can be beyond its type (a range, a rule between two fields of one node) is in
  the dataclass's `__post_init__`, which runs when `check` turns the node into its dataclass
  (OmegaConf does not run it while composing). What depends on another group (the launcher's
  world size, the model's split, the family) is checked by the code that knows both.
- Plain dataclasses, not frozen ones: OmegaConf makes a frozen dataclass's node read-only,
  and Hydra could not merge the yaml and the overrides onto it.
- Choices are StrEnums: OmegaConf checks the name, and a member is its value as a string
  (in comparisons, f-strings and JSON).
- The fields have no defaults: the option's yaml sets every key, with its comment.

The model, data and optimizer groups stay open: their keys are the arguments of the class or
builder they name (checked against its signature: snn/models, data/, optimizer.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.known_keys import refuse_unknown, where
from experiments.schemas.launcher import LAUNCHER_SCHEMAS
from experiments.schemas.logger import LOGGER_SCHEMAS
from experiments.schemas.run import RunConfig
from experiments.schemas.topology import TopologyConfig
from experiments.schemas.trainer import ClassifyTrainerConfig, TrainerConfig, trainer_schema

# ConfigStore name -> schema; a yaml option names its schema in its defaults list by this name
SCHEMAS: dict[str, type] = {
    "run_schema": RunConfig,
    "topology_schema": TopologyConfig,
    "launcher_local_schema": LAUNCHER_SCHEMAS["local"],
    "launcher_torchrun_schema": LAUNCHER_SCHEMAS["torchrun"],
    "launcher_slurm_schema": LAUNCHER_SCHEMAS["slurm"],
    "logger_tensorboard_schema": LOGGER_SCHEMAS["tensorboard"],
    "logger_csv_schema": LOGGER_SCHEMAS["csv"],
    "logger_mlflow_schema": LOGGER_SCHEMAS["mlflow"],
    "logger_wandb_schema": LOGGER_SCHEMAS["wandb"],
    "trainer_default_schema": TrainerConfig,
    "trainer_classify_schema": ClassifyTrainerConfig,
}


def register() -> None:
    """Into Hydra's ConfigStore, before Hydra composes (hydra_plugins/experiments_schemas:
    Hydra imports its plugins' modules when it starts)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        store.store(name=name, node=schema, provider="experiments")


def check(cfg: DictConfig, values: dict[str, Any], choices: dict[str, Any]) -> None:
    """Every typed node of the composed config made its dataclass, so that each
    `__post_init__` checks its ranges and rules (ConfigError names the first key that breaks
    one); before that, a key added with `+` that its schema has not (Hydra lets `+` add one
    to a typed node) is refused with the nearest key it has."""
    refuse_unknown("", values, _fields(RunConfig), "the run config")
    RunConfig.from_values(values)
    for path, node in _group_nodes(cfg, choices):
        _refuse_added_keys(path, node, choices)
        OmegaConf.to_object(node)


def _group_nodes(cfg: DictConfig, choices: dict[str, Any]) -> Iterator[tuple[str, DictConfig]]:
    """(path, node) of each group's node that has a schema of ours. A node that an option of
    the user's own composed without naming its schema is typed here, so its values are
    checked all the same."""
    for path, schema in _schemas_of(cfg):
        node = OmegaConf.select(cfg, path)
        if OmegaConf.get_type(node) is not schema:
            node = _typed(node, schema, path, choices)
        yield path, node


def _schemas_of(cfg: DictConfig) -> Iterator[tuple[str, type]]:
    yield "topology", TopologyConfig
    launcher = LAUNCHER_SCHEMAS.get(str(cfg.launcher.get("name")))
    if launcher is not None:  # another name is refused by the launcher group itself
        yield "launcher", launcher
    for name in cfg.get("logger") or {}:
        if str(name) in LOGGER_SCHEMAS:  # another is refused by loggers.validate
            yield f"logger.{name}", LOGGER_SCHEMAS[str(name)]
    yield "trainer", trainer_schema(cfg.trainer.get("name"))


def _typed(node: DictConfig, schema: type, path: str, choices: dict[str, Any]) -> DictConfig:
    """`node` merged onto its schema, at its own path (so OmegaConf's errors name the key)."""
    from experiments.composition_errors import refusal

    root = OmegaConf.create()
    OmegaConf.update(root, path, OmegaConf.structured(schema))
    typed = OmegaConf.select(root, path)
    try:
        typed.merge_with(node)
    except Exception as error:
        refused = refusal(error, [], lambda: choices)
        if refused is None:
            raise
        raise refused from None
    return typed


def _refuse_added_keys(path: str, node: DictConfig, choices: dict[str, Any]) -> None:
    """In `node` and in its typed nodes (trainer.spikes, ...)."""
    schema = OmegaConf.get_type(node)
    refuse_unknown(f"{path}.", node, _fields(schema), where(path, choices))
    for key in _fields(schema):
        child = node.get(key)
        if OmegaConf.is_dict(child) and dataclasses.is_dataclass(OmegaConf.get_type(child)):
            _refuse_added_keys(f"{path}.{key}", child, choices)


def _fields(schema: Any) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(schema))
