"""Early stopping and per-evaluation reporting, shared by the engines whose loops take a hook
(what `trainer.early_stopping` does: docs/sweeps.md#early-stopping; a GAN run, which has no
per-interval validation, evaluates its log interval's losses).

The same call (`Monitor.after_evaluation`) reports the run's objective to an Optuna study
when the run is a trial of a search with a pruner (run/search_trial.py), and raises `Pruned`
when the pruner stops it. One object, one call per evaluation: each engine adds a few lines,
not a policy of its own. Engines: SpikingJelly's `train_classification` (its evaluation,
through our seam: snn/engines/spikingjelly_loop.py), its classic Trainer (`classify`) and
MMGen's runner (an mmcv hook).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from experiments.errors import ConfigError


@dataclass(frozen=True)
class EarlyStopping:
    """A validated `trainer.early_stopping` with `auto` resolved."""

    metric: str
    mode: str  # max | min
    patience: int
    min_delta: float

    def better(self, value: float, best: float | None) -> bool:
        """Improves on `best` by more than min_delta (a NaN never improves)."""
        if math.isnan(value):
            return False
        if best is None:
            return True
        if self.mode == "max":
            return value > best + self.min_delta
        return value < best - self.min_delta


def from_trainer(
    trainer: dict[str, Any],
    metrics: tuple[str, ...],
    source: str = "the run evaluates",
) -> EarlyStopping | None:
    """`trainer.early_stopping` for this family; None when off (patience null). `metrics`:
    what the family's loop evaluates while it trains (the first is `auto`), `source` who
    does. Every engine's loop can stop after an evaluation. The keys' types and ranges are
    their schema's (schemas/trainer.py); raises ConfigError for what the family decides."""
    node = trainer.get("early_stopping") or {}
    patience = node.get("patience")
    if patience is None:
        return None
    metric = node.get("metric", "auto")
    if metric == "auto":
        metric = metrics[0]
    if metric not in metrics:
        raise ConfigError(
            "trainer.early_stopping.metric",
            metric,
            f"one of auto, {', '.join(metrics)} (what {source} while it trains)",
        )
    mode = node.get("mode", "auto")
    if mode == "auto":
        mode = "max" if metric.endswith("accuracy") else "min"
    return EarlyStopping(metric, mode, patience, float(node.get("min_delta", 0.0)))


def attach(plan: Any, trainer: dict[str, Any], family: Any) -> Any:
    """Planning: the plan carries its checked early-stopping settings (or None). `family`
    (experiments.families.Family) says what can be monitored."""
    plan.early_stopping = from_trainer(trainer, family.monitored, family.monitored_source)
    return plan


@dataclass
class Verdict:
    improved: bool  # this evaluation is the best so far: keep a checkpoint of it
    stop: bool  # patience used up: stop after this evaluation's checkpoint


class Pruned(Exception):
    """The search's pruner stopped this run after an evaluation: the run ends at once and
    is recorded `pruned` (train.py), the trial PRUNED (sweepers/optuna.py)."""

    def __init__(self, record: dict[str, Any], metrics: dict[str, Any]) -> None:
        super().__init__(
            f"pruned by the search's pruner at step {record['step']} "
            f"({record['objective']}={record['value']})"
        )
        self.record = record
        self.metrics = metrics


class Monitor:
    """One per run, on every rank. `agree(value)` returns rank 0's value on every rank
    (a broadcast; identity in one process): decisions that read a shared storage are rank
    0's, so all ranks stop together."""

    def __init__(
        self,
        settings: EarlyStopping | None,
        objective: str,
        summary: dict[str, Any],
        reporter: Any = None,
        agree: Callable[[Any], Any] = lambda value: value,
    ) -> None:
        self.settings = settings
        self.objective = objective
        self.summary = summary  # the recorder's summary (rank 0 writes it)
        self.reporter = reporter
        self.agree = agree
        self.best: float | None = None
        self.best_step: int | None = None
        self.best_epoch: int | None = None
        self.bad = 0  # evaluations since the last improvement
        self.evaluations = 0
        self.checkpoint: str | None = None
        if settings is not None:
            summary["early_stopping"] = {**asdict(settings), "stopped": False}

    @classmethod
    def for_plan(cls, plan: Any, summary: dict[str, Any], agree: Any = None) -> Monitor:
        from experiments.run.search_trial import TrialReporter

        return cls(
            getattr(plan, "early_stopping", None),
            plan.objective,
            summary,
            TrialReporter.for_run(plan.run_dir),
            agree or (lambda value: value),
        )

    @property
    def active(self) -> bool:
        return self.settings is not None or self.reporter is not None

    def after_evaluation(self, step: int, epoch: int | None, metrics: dict[str, Any]) -> Verdict:
        """After each evaluation: report to the study (may raise Pruned), then the early-
        stopping verdict."""
        self.evaluations += 1
        if self.reporter is not None:
            value = reported_value(metrics, self.objective)
            prune = self.agree(self.reporter.report(value, self.evaluations))
            if self.reporter.off is not None:  # the storage failed for good: never silently
                self.summary.setdefault("pruning_off", self.reporter.off)
            if prune:
                record = {
                    "step": step,
                    "epoch": epoch,
                    "evaluation": self.evaluations,
                    "objective": self.objective,
                    "value": value,
                    "trial": self.reporter.number,
                }
                self.summary["pruned"] = record
                raise Pruned(record, {**_finite(metrics), "steps": step})
        settings = self.settings
        if settings is None:
            return Verdict(False, False)
        value = float(metrics.get(settings.metric, math.nan))
        improved = settings.better(value, self.best)
        if improved:
            self.best, self.best_step, self.best_epoch, self.bad = value, step, epoch, 0
        else:
            self.bad += 1
        stop = self.bad >= settings.patience
        record = self.summary["early_stopping"]
        record.update(best=self.best, best_step=self.best_step, best_epoch=self.best_epoch)
        if stop:
            record.update(
                stopped=True,
                stopped_at_step=step,
                stopped_at_epoch=epoch,
                reason=f"{settings.metric} did not improve by more than {settings.min_delta} "
                f"for {settings.patience} evaluation(s) after its best, "
                f"{self.best} at step {self.best_step}",
            )
        return Verdict(improved, stop)

    def kept(self, path: Any) -> None:
        """Where the engine saved the best evaluation's checkpoint."""
        self.checkpoint = str(path)
        if self.settings is not None:
            self.summary["early_stopping"]["best_checkpoint"] = self.checkpoint

    def replay(self, records: list[dict[str, Any]] | None) -> None:
        """A resumed run continues its count: the evaluations its records keep (those up to
        the checkpoint it resumed), replayed in order. Nothing is reported to a study again
        (each was reported when it happened)."""
        self.best = self.best_step = self.best_epoch = None
        self.bad = self.evaluations = 0
        for record in records or []:
            self.evaluations += 1
            if self.settings is None:
                continue
            value = float(record.get(self.settings.metric, math.nan))
            if self.settings.better(value, self.best):
                self.best, self.best_step, self.bad = value, record.get("step"), 0
                self.best_epoch = record.get("epoch")
            else:
                self.bad += 1
        if self.settings is not None:
            self.summary["early_stopping"].update(
                best=self.best, best_step=self.best_step, best_epoch=self.best_epoch
            )


def reported_value(metrics: dict[str, Any], objective: str) -> float:
    """The objective as the study sees it: NaN when the epoch's losses are not finite (a
    diverged run's accuracy is that of a constant guess, not a measurement). The reporter
    stores it as the worst value, which every pruner stops."""
    value = float(metrics.get(objective, math.nan))
    losses = [v for k, v in metrics.items() if "loss" in k and isinstance(v, (int, float))]
    if not all(math.isfinite(v) for v in losses):
        return math.nan
    return value


def _finite(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))}
