"""Weights & Biases, offline unless the user says otherwise: the run's files land in
<run>/wandb/offline-run-*/ and `wandb sync` uploads them later. A sweep is one W&B group."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.loggers import Logger, RunInfo


def validate(settings: dict[str, Any]) -> None:
    """An online run has a login before launch (the keys' types are the schema's:
    schemas/logger.py)."""
    mode = settings.get("mode", "offline")
    if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _netrc_has_wandb()):
        raise ConfigError(
            "logger.wandb.mode",
            mode,
            "offline (then `wandb sync`), or log in first (`wandb login` or WANDB_API_KEY)",
        )


def _netrc_has_wandb() -> bool:
    import netrc

    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def init_kwargs(settings: dict[str, Any], info: RunInfo) -> dict[str, Any]:
    group = settings.get("group") or (info.sweep_dir.name if info.sweep_dir is not None else None)
    tags = [f"{k}={v}"[:64] for k, v in info.tags.items()] + [
        str(t)[:64] for t in settings.get("tags") or []
    ]
    return dict(
        project=settings.get("project") or "experiments",
        entity=settings.get("entity"),
        mode=settings.get("mode", "offline"),
        group=group,
        name=settings.get("name") or info.name,
        notes=settings.get("notes"),
        tags=tags,
        config=info.config,
        dir=str(info.run_dir),
        # One W&B run per run directory: a resumed run continues it.
        id=hashlib.sha1(str(info.run_dir.resolve()).encode()).hexdigest()[:16],
        resume="allow",
    )


class WandbLogger(Logger):
    name = "wandb"

    def __init__(self, settings: dict[str, Any], info: RunInfo) -> None:
        super().__init__(settings, info)
        self.kwargs = init_kwargs(settings, info)
        self.run: Any = None

    def start(self) -> None:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(**self.kwargs)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def artifact(self, path: Path) -> None:
        self.run.save(str(path), base_path=str(path.parent), policy="now")

    def finish(self, status: str, metrics: dict[str, float]) -> None:
        self.run.summary.update({f"final/{k}": v for k, v in metrics.items()})
        self.run.finish(exit_code=0 if status == "completed" else 1)

    def mmcv_hook(self, interval: int) -> dict[str, Any] | None:
        # Our run is already active; the hook's wandb.init returns it, and the hook must not
        # finish it (the final metrics and sample grids come after training).
        return dict(
            type="ExperimentsWandbLoggerHook",
            init_kwargs={**self.kwargs, "reinit": "return_previous"},
            interval=interval,
            log_artifact=False,
        )


make = WandbLogger


def log_sweep_report(settings: dict[str, Any], sweep_dir: Path, files: list[Path]) -> None:
    import wandb

    run = wandb.init(
        project=settings.get("project") or "experiments",
        entity=settings.get("entity"),
        mode=settings.get("mode", "offline"),
        group=settings.get("group") or sweep_dir.name,
        name="sweep report",
        job_type="report",
        dir=str(sweep_dir),
        reinit="create_new",
    )
    for path in files:
        run.save(str(path), base_path=str(path.parent), policy="now")
    run.finish()
