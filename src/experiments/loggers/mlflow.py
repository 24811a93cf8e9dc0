"""MLflow: one run per training run, in one experiment per sweep. Local by default: a SQLite
store in the sweep (or run) directory with artifacts beside it in mlruns/. (MLflow 3 keeps
the plain ./mlruns file store in maintenance mode and refuses it by default; SQLite is what
it recommends for a local store.)"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from experiments.errors import ConfigError
from experiments.loggers import Logger, RunInfo

DATABASE = "mlflow.db"
ARTIFACTS = "mlruns"
BATCH = 100  # MLflow's limit of parameters per log_batch call


def validate(settings: dict[str, Any]) -> None:
    """A server's tracking_uri answers before launch (its form is checked by its schema:
    schemas/logger.py)."""
    uri = settings.get("tracking_uri")
    scheme = urlparse(str(uri)).scheme if uri is not None else None
    if scheme in ("http", "https"):
        parsed = urlparse(str(uri))
        port = parsed.port or (443 if scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=3).close()
        except OSError as error:
            raise ConfigError(
                "logger.mlflow.tracking_uri",
                uri,
                f"a reachable MLflow server ({error}); null logs locally",
            ) from None


def tracking_uri(settings: dict[str, Any], store_dir: Path) -> str:
    return settings.get("tracking_uri") or f"sqlite:///{store_dir.resolve() / DATABASE}"


def experiment_name(settings: dict[str, Any], info: RunInfo) -> str:
    if settings.get("experiment_name"):
        return str(settings["experiment_name"])
    return info.sweep_dir.name if info.sweep_dir is not None else "experiments"


def _experiment(client: Any, name: str, store_dir: Path) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        location = (store_dir.resolve() / ARTIFACTS).as_uri()
        return client.create_experiment(name, artifact_location=location)
    except Exception:  # another point of the sweep created it first
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


class MLflowLogger(Logger):
    name = "mlflow"

    def __init__(self, settings: dict[str, Any], info: RunInfo) -> None:
        super().__init__(settings, info)
        self.uri = tracking_uri(settings, info.store_dir)
        self.client: Any = None
        self.run_id: str | None = None

    def start(self) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(self.uri)
        experiment = _experiment(
            self.client, experiment_name(self.settings, self.info), self.info.store_dir
        )
        tags = {
            **self.info.tags,
            **{str(k): str(v) for k, v in (self.settings.get("tags") or {}).items()},
        }
        name = self.settings.get("run_name") or self.info.name
        run = self.client.create_run(experiment, run_name=str(name), tags=tags)
        self.run_id = run.info.run_id
        params = [Param(k, str(v)[:6000]) for k, v in self.info.params.items()]
        for first in range(0, len(params), BATCH):
            self.client.log_batch(self.run_id, params=params[first : first + BATCH])
        if self.uses_mmcv_hook:  # mmcv's MlflowLoggerHook logs into this run (fluent API)
            import os

            os.environ["MLFLOW_TRACKING_URI"] = self.uri
            os.environ["MLFLOW_RUN_ID"] = self.run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(_key(k), float(v), now, step) for k, v in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self, status: str, metrics: dict[str, float]) -> None:
        state = {"completed": "FINISHED", "failed": "FAILED"}.get(status, "KILLED")
        try:
            if metrics:
                self.log({f"final/{k}": v for k, v in metrics.items()}, step=0)
        finally:
            if self.uses_mmcv_hook:
                import mlflow

                if mlflow.active_run() is not None:  # the hook's fluent run: ours, by id
                    mlflow.end_run(state)
            self.client.set_terminated(self.run_id, state)

    def mmcv_hook(self, interval: int) -> dict[str, Any] | None:
        return dict(
            type="ExperimentsMlflowLoggerHook", exp_name=None, log_model=False, interval=interval
        )


def _key(name: str) -> str:
    """MLflow keys take letters, digits, _ - . / and spaces."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)


make = MLflowLogger


def prepare_sweep(settings: dict[str, Any], sweep_dir: Path) -> None:
    from mlflow.tracking import MlflowClient

    sweep_dir.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri(settings, sweep_dir))
    _experiment(client, settings.get("experiment_name") or sweep_dir.name, sweep_dir)


def log_sweep_report(settings: dict[str, Any], sweep_dir: Path, files: list[Path]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri(settings, sweep_dir))
    name = settings.get("experiment_name") or sweep_dir.name
    run = client.create_run(
        _experiment(client, name, sweep_dir),
        run_name="sweep report",
        tags={"sweep": sweep_dir.name, "kind": "report"},
    )
    for path in files:
        client.log_artifact(run.info.run_id, str(path))
    client.set_terminated(run.info.run_id, "FINISHED")
