"""The family seam: the one place outside `snn/` and `gan/` that knows model families exist
(ARCHITECTURE.md).

A family (spiking networks on SpikingJelly, GANs on MMGeneration, or one a user adds) is one
`Family` object: which models it owns, its engines (name -> module), how it plans a run, the
metric a search optimises, what the report draws, what a finished run prints and hands its
loggers, how a recorded run is evaluated and sampled. Adding a family is one module and one
line here (or, for a package of your own, one entry point in the `experiments.families`
group). Families are loaded lazily: the built-in ones by module name, so `import experiments`
does not import torch, SpikingJelly or MMGen.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from experiments.errors import ConfigError

# The built-in families, by the module that defines `FAMILY`. The first one whose `owns`
# accepts a model wins; the last is the default (a model config without `family:`).
BUILTIN = ("experiments.gan.family", "experiments.snn.family")
# Families of installed packages: `[project.entry-points."experiments.families"]` in their
# pyproject, `<name> = "<module>"`, the module defining `FAMILY`.
ENTRY_POINT_GROUP = "experiments.families"


@dataclass(frozen=True)
class Curve:
    """One learning-curve panel of the report: `y` against `x` from a run's JSON-lines log."""

    log: str
    x: str
    y: str
    xlabel: str
    title: str


@dataclass(frozen=True)
class Tradeoff:
    """A sweep figure of the objective against a cost the family measures (lower is better):
    one dot per completed point, the Pareto front marked, and the front listed in report.md."""

    cost: str  # a metric of the family's (summary.json's metrics)
    label: str  # its axis label
    filename: str  # the figure's name in the sweep directory


def _no_artifacts(run_dir: Path, metrics: dict[str, Any]) -> list[Path]:
    return []


@dataclass(frozen=True)
class Family:
    """Everything the shared code needs to know about one model family."""

    name: str
    # which composed `model` values belong to this family
    owns: Callable[[Mapping[str, Any]], bool]
    # engine name (trainer.engine, summary.json's `engine`) -> module with train(plan, recorder)
    engines: Mapping[str, str]
    # "module:function": function(cfg, values, run_dir, overrides, choices, extensions) -> plan
    planner: str
    # the metric a search optimises and a re-run of a completed run reports
    objective: str
    higher_is_better: bool
    # the report's columns, and its two learning-curve panels
    metrics: tuple[str, ...]
    curves: tuple[Curve, ...]
    # what `trainer.early_stopping.metric` may monitor (the first is `auto`)
    monitored: tuple[str, ...] = ()
    monitored_source: str = "the run evaluates"  # "what <this> while it trains"
    # engines of earlier versions that no longer train: name -> why a run it recorded cannot
    # be resumed, and what to do instead
    retired_engines: Mapping[str, str] = field(default_factory=dict)
    # the lines a finished run prints: function(plan, summary) -> str
    completed_lines: Callable[[Any, dict[str, Any]], str] | None = None
    # what a finished run hands its loggers besides plan.json: function(run_dir, metrics)
    artifacts: Callable[[Path, dict[str, Any]], list[Path]] = _no_artifacts
    # module with evaluate_run(run_dir, checkpoint, overrides) -> exit status (experiments-eval)
    evaluator: str | None = None
    # module with export_run(run_dir, checkpoint, out, ema) -> Path (experiments-export)
    exporter: str | None = None
    # per-iteration metrics reach loggers through mmcv's logger hooks (not our loop's log)
    logs_through_mmcv: bool = False
    # imported once by a local sweep's warm process (launchers/warm_points.py)
    warm_modules: tuple[str, ...] = ()
    # imported by that warm process too when the sweep's login imported them planning its
    # points (launchers/warm_points.py modules_for): libraries only some runs use
    warm_if_planned: tuple[str, ...] = ()
    # the objective against a measured cost, drawn for every sweep (report/figures.py)
    tradeoff: Tradeoff | None = None
    # metrics besides the objective a search may optimise (`objective=`): name -> higher is
    # better (the objective itself is always one, with `higher_is_better`)
    other_objectives: Mapping[str, bool] = field(default_factory=dict)

    @property
    def directions(self) -> dict[str, bool]:
        """Every metric a search may optimise -> whether higher is better."""
        return {self.objective: self.higher_is_better, **self.other_objectives}

    def rank_key(self, value: float) -> float:
        """Sorting by this puts the best value first."""
        return -value if self.higher_is_better else value

    def plan(self, *args: Any) -> Any:
        module, _, function = self.planner.partition(":")
        return getattr(importlib.import_module(module), function)(*args)

    def engine(self, name: str) -> ModuleType:
        return importlib.import_module(self.engines[name])


_registry: dict[str, Family] = {}
_loaded = False


def all_families() -> list[Family]:
    _load()
    return list(_registry.values())


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from importlib.metadata import entry_points

    modules: list[str] = [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)]
    for name in [*modules, *BUILTIN]:
        family = importlib.import_module(name).FAMILY
        _registry.setdefault(family.name, family)


def for_model(model: Any) -> Family:
    """The family that owns a composed `model` group (plain values)."""
    model = model if hasattr(model, "get") else {}
    for family in all_families():
        if family.owns(model):
            return family
    raise ConfigError(  # only when no family (built-in or installed) claims the model
        "model.family", model.get("family"), "one of " + ", ".join(_registry)
    )


def for_engine(engine: str | None) -> Family:
    """The family an engine name belongs to (the last family, the default, when unknown:
    a summary.json too old or too broken to say)."""
    families = all_families()
    for family in families:
        if engine in family.engines:
            return family
    return families[-1]


def refuse_retired_engine(run_dir: Path) -> None:
    """A run directory whose record names an engine no family trains with any more is
    refused before launch (resuming it would meet checkpoints no engine reads)."""
    from experiments.run.record import SUMMARY, read_summary

    engine = (read_summary(run_dir) or {}).get("engine")
    for family in all_families():
        if engine in family.retired_engines:
            raise ConfigError(
                "trainer.engine",
                engine,
                f"{run_dir / SUMMARY} records a run trained by {family.retired_engines[engine]}",
            )


def for_summary(summary: Mapping[str, Any]) -> Family:
    return for_engine(summary.get("engine"))


def for_points(points: Iterable[Mapping[str, Any]]) -> Family:
    """A sweep's family: the one all its readable points' engines belong to (the default
    when they disagree or none is readable)."""
    engines = {p["summary"].get("engine") for p in points} - {None}
    found = {for_engine(engine).name for engine in engines}
    families = all_families()
    if len(found) == 1:
        return next(f for f in families if f.name in found)
    return families[-1]


def engine_names() -> list[str]:
    return [name for family in all_families() for name in family.engines]
