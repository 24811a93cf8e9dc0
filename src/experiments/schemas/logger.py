"""`logger=<name>`'s schemas: each option keeps its settings under `logger.<name>.*`
(conf/logger/<name>.yaml -> loggers/<name>.py). What a logger needs from the machine (a
package, a reachable server, a login) is checked by its module's `validate`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlparse

from experiments.errors import ConfigError


@dataclass
class TensorBoardConfig:
    hparams: bool  # write the HParams plugin data at the end of the run


@dataclass
class CSVLoggerConfig:
    dir: str  # relative to the run directory

    def __post_init__(self) -> None:
        if not self.dir or os.path.isabs(self.dir) or ".." in self.dir:
            raise ConfigError("logger.csv.dir", self.dir, "a folder name inside the run directory")


# MLflow tracking stores we can reach: a SQLite file, a server, a file store
MLFLOW_SCHEMES = ("sqlite", "http", "https", "file")


@dataclass
class MLflowConfig:
    tracking_uri: str | None  # null: sqlite:///<sweep or run dir>/mlflow.db
    experiment_name: str | None  # null: the sweep directory's name
    run_name: str | None  # null: the point's overrides
    tags: dict[str, Any]  # extra tags; model, topology, launcher, sweep id and point are set

    def __post_init__(self) -> None:
        if self.tracking_uri is None:
            return
        if urlparse(self.tracking_uri).scheme not in MLFLOW_SCHEMES:
            raise ConfigError(
                "logger.mlflow.tracking_uri",
                self.tracking_uri,
                "sqlite:///<file>, http(s)://<host>, or null (local)",
            )


class WandbMode(StrEnum):
    offline = "offline"  # files in <run>/wandb; `wandb sync` uploads them later
    online = "online"
    disabled = "disabled"


@dataclass
class WandbConfig:
    project: str
    entity: str | None
    mode: WandbMode
    group: str | None  # null: the sweep directory's name (single runs: no group)
    name: str | None  # null: the point's overrides
    tags: list[str]
    notes: str | None


# logger.<name> -> its schema (experiments.loggers.NAMES names the same four)
LOGGER_SCHEMAS: dict[str, type] = {
    "tensorboard": TensorBoardConfig,
    "csv": CSVLoggerConfig,
    "mlflow": MLflowConfig,
    "wandb": WandbConfig,
}
