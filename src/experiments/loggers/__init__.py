"""Logger group: `conf/logger/<name>.yaml` -> `loggers/<name>.py`; `logger=[a,b]` selects
several (each keeps its settings under `logger.<name>.*`). What every logger gets:
docs/loggers.md.

SNN runs log from rank 0 through the run recorder (run/record.py). GAN runs log their
per-iteration metrics through mmcv's own logger hooks, added to the recipe's `log_config`
(`mmcv_hook`); the logger then adds only what mmcv does not log to the same run. Nothing here
may stop a run half-way: `validate` refuses what cannot work before launch, and a logger error
during the run is logged once and that logger is dropped.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.dotted_keys import flatten
from experiments.errors import ConfigError
from experiments.families import for_engine

log = logging.getLogger(__name__)

NAMES = ("tensorboard", "csv", "mlflow", "wandb")
INSTALL = "make setup-loggers (or pip install '.[loggers]' in the checkout)"


@dataclass
class RunInfo:
    """What every logger is told about the run."""

    run_dir: Path
    name: str  # the point's overrides, or the run directory's name
    sweep_dir: Path | None  # the sweep directory when this run is a point of a sweep
    point: str | None
    config: dict[str, Any]  # the resolved config (nested)
    tags: dict[str, str] = field(default_factory=dict)
    # the family's per-iteration metrics reach loggers through mmcv's logger hooks (GANs)
    logs_through_mmcv: bool = False

    @property
    def params(self) -> dict[str, Any]:
        return flatten(self.config, leaf=_scalar)

    @property
    def store_dir(self) -> Path:
        """Where a local logger store lives: the sweep's directory, else the run's."""
        return self.sweep_dir or self.run_dir


class Logger:
    """A logger module's `make(settings, info)` returns one; what it does not override does
    nothing (artefacts stay where the run wrote them). Optional `truncate` and `histogram` are
    looked for with hasattr (run/record.py)."""

    name: str

    def __init__(self, settings: dict[str, Any], info: RunInfo) -> None:
        self.settings = settings
        self.info = info
        self.uses_mmcv_hook = info.logs_through_mmcv  # GAN runs: per-iteration metrics via mmcv

    def start(self) -> None: ...
    def log(self, metrics: dict[str, float], step: int) -> None: ...
    def artifact(self, path: Path) -> None: ...
    def finish(self, status: str, metrics: dict[str, float]) -> None: ...
    def mmcv_hook(self, interval: int) -> dict[str, Any] | None: ...


def selected(logger: dict[str, Any] | None) -> list[str]:
    return [name for name in (logger or {}) if name in NAMES]


def validate(logger: dict[str, Any] | None) -> list[str]:
    """Check the selected loggers before launch (their keys' types and rules are their
    schemas': schemas/logger.py): installed, and what the module's own `validate` asks of
    the machine (a reachable server, a login); returns their names."""
    names = []
    for name, settings in (logger or {}).items():
        if name not in NAMES:
            raise ConfigError(f"logger.{name}", settings, "a logger: " + ", ".join(NAMES))
        package = "torch.utils.tensorboard" if name == "tensorboard" else name
        if _missing(package):
            raise ConfigError(
                "logger", name, f"{name} is not installed: {INSTALL}, or leave it out of logger="
            )
        machine_check = getattr(module(name), "validate", None)
        if machine_check is not None:
            machine_check(settings or {})
        names.append(name)
    return names


def _missing(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is None
    except ModuleNotFoundError:
        return True


def module(name: str) -> Any:
    return importlib.import_module(f"experiments.loggers.{name}")


def open_loggers(logger: dict[str, Any] | None, info: RunInfo) -> list[Logger]:
    opened = []
    for name in selected(logger):
        try:
            one = module(name).make(logger[name] or {}, info)
            one.start()
        except Exception as error:  # validated before launch; a store that fails now is logged
            log.warning("logger %s did not start (%s); the run goes on without it", name, error)
            continue
        opened.append(one)
    return opened


def _scalar(value: Any) -> Any:
    """Loggers take scalars: lists, None and empty mappings become strings."""
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def sweep_of(run_dir: Path) -> Path | None:
    """A point of a -m sweep lives in <sweep dir>/<n>/, beside Hydra's multirun.yaml."""
    return run_dir.parent if (run_dir.parent / "multirun.yaml").exists() else None


def run_info(plan: Any, config: dict[str, Any]) -> RunInfo:
    run_dir = Path(plan.run_dir)
    sweep_dir = sweep_of(run_dir)
    shown = [o for o in plan.overrides if not o.startswith(("hydra.", "dry_run="))]
    tags = {key: str(plan.choices.get(key)) for key in ("model", "data", "topology", "launcher")}
    tags["engine"] = str(plan.engine)
    if sweep_dir is not None:
        tags.update(sweep=sweep_dir.name, point=run_dir.name)
    config = {k: v for k, v in config.items() if k != "hydra"}
    return RunInfo(
        run_dir=run_dir,
        name=(" ".join(shown) or run_dir.name)[:250],
        sweep_dir=sweep_dir,
        point=run_dir.name if sweep_dir is not None else None,
        config=config,
        tags=tags,
        logs_through_mmcv=for_engine(plan.engine).logs_through_mmcv,
    )


def prepare_sweep(logger: dict[str, Any] | None, sweep_dir: Path) -> None:
    """Before a sweep's first point: create what its points will share (MLflow's SQLite
    store and the sweep's experiment), so parallel Slurm jobs do not race to create it."""
    _each_sweep_hook("prepare_sweep", logger, sweep_dir)


def log_sweep_report(logger: dict[str, Any] | None, sweep_dir: Path, files: list[Path]) -> None:
    """The sweep's report (tables and figures) where the loggers take a sweep-level record:
    an MLflow run named "sweep report" in the sweep's experiment, a W&B run of job type
    "report" in the sweep's group."""
    _each_sweep_hook("log_sweep_report", logger, sweep_dir, files)


def _each_sweep_hook(hook: str, logger: dict[str, Any] | None, *args: Any) -> None:
    """Call `hook(settings, *args)` of each selected logger that has one; a failure is a
    warning (the sweep's points and report stand without it)."""
    for name in selected(logger):
        function = getattr(module(name), hook, None)
        if function is None:
            continue
        try:
            function(logger[name] or {}, *args)
        except Exception as error:
            log.warning("logger %s: %s failed (%s)", name, hook, error)


def where_to_look(run_dir: Path, logger: dict[str, Any]) -> str:
    """The lines a finished run prints: where to look at it in each selected logger."""
    where = sweep_of(run_dir) or run_dir
    lines = []
    if "tensorboard" in logger:
        lines.append(f"  tensorboard   tensorboard --logdir {where.resolve()}")
    if "mlflow" in logger:
        from experiments.loggers import mlflow

        uri = mlflow.tracking_uri(logger["mlflow"] or {}, where)
        lines.append(f"  mlflow        mlflow ui --backend-store-uri {uri}")
    if "wandb" in logger and (logger["wandb"] or {}).get("mode", "offline") == "offline":
        lines.append(f"  wandb         wandb sync {run_dir.resolve()}/wandb/offline-run-*")
    if "csv" in logger:
        folder = (logger["csv"] or {}).get("dir", "csv")
        lines.append(f"  csv           {run_dir.resolve() / folder / 'metrics.csv'}")
    return "".join(f"\n{line}" for line in lines)
