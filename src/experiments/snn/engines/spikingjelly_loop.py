"""The one seam into SpikingJelly's `train_classification`, which has no hooks or callbacks.

Written against spikingjelly 2.0.0 (pinned in pyproject.toml); `tests/test_loop_seam.py`
fails, naming the installed version, when a name in `REPLACED` or the `*_LOCALS` is gone.
The loop looks those module globals up at call time, so each is swapped only inside our rank
processes while the loop runs and restored on exit; nothing is edited on disk.

The step hook rides on `torch.cuda.synchronize`, which the loop calls exactly twice per
optimizer step on every rank and topology. The library saves only every
`checkpoint_interval` steps, so `_live_config` answers 1 for a step we must save (the last
one, an agreed stop) and `max_steps` 0 at a stop: the loop breaks right after the save and a
stop loses nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import shutil
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist

from experiments import collectives, garbage_collection
from experiments.run.record import RunRecorder, no_space
from experiments.run.stop import GracefulStop
from experiments.snn.engines.spikingjelly_checkpoints import (
    BEST,
    checkpoint_step,
    no_space_in_save,
    remove_all_but_newest,
    write_mesh,
)
from experiments.snn.plan import SNNPlan

log = logging.getLogger(__name__)
# DCP's save with no_dist=True (a one-rank checkpoint group: _one_writer_uncoordinated) warns
# that it assumes one process; that is what it is.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninit")

WRITTEN_AGAINST = "2.0.0"  # spikingjelly's version this seam reads
REPLACED = (
    "torch",
    "dist",
    "_build_loaders",
    "_load_checkpoint",
    "_save_checkpoint",
    "_finish_checkpoint",
    "_evaluate",
    "_evaluate_pipeline",
    "_forward_classification",
    "_classification_loss",
)
STEP_LOCALS = (
    "global_step",
    "loss",
    "model",
    "optimizer",
    "dp_group",
    "dp_size",
    "train_loader",
    "epoch",
    "targets",
    "totals",
    "dp_rank",
)
EVALUATION_LOCALS = (
    "global_step",
    "epoch",
    "batch_index",
    "train_loss",
    "config",
    "model",
    "optimizer",
    "scheduler",
    "scaler",
    "device",
    "tp_rank",
    "pp_rank",
    "dp_rank",
    "checkpoint_group",
    "checkpoint_future",
    "training_seconds",
    "processed_images",
    "dp_group",
    "validation_loader",
    "evaluation_step",
    "evaluation_schedule",
    "precision",
)
TRAIN_STEP_LOCALS = ("loss_targets", "loss_function", "scaler", "precision")
SYNCHRONIZE_CALLS = 2  # torch.cuda.synchronize(device) per optimizer step
MIXUP_BUILT = "MixUp"  # the loop's `v2.MixUp(alpha=config.mixup_alpha, num_classes=...)`
MIXUP_LOCALS = ("epoch", "dp_rank", "global_step")  # read by mixup.TimmMixup at its call
NEVER = 2**62  # a checkpoint interval no run reaches: the library keeps its checkpoint groups


class EarlyStopped(Exception):
    """Raised on every rank from the evaluation hook once early stopping's patience is used
    up (after the step's checkpoint is saved): the library's clean-up runs, the engine
    records the run as completed with that evaluation's metrics."""


class LoopHooks:
    def __init__(
        self,
        plan: SNNPlan,
        recorder: RunRecorder,
        config: Any,
        device: torch.device,
        stop: GracefulStop | None,
        monitor: Any,
        profiler: Any,
        resume: Any = None,
        spikes: Any = None,
    ) -> None:
        self.plan = plan
        self.recorder = recorder
        self.device = device
        self.stop = stop
        self.resume = resume
        self.profiler = profiler
        self.interval = config.checkpoint_interval
        self.max_steps = config.max_steps
        self.config = _live_config(config, self)
        trainer = plan.trainer
        self.log_every = int(trainer.get("log_every_n_steps", 1))
        self.keep = int(trainer.get("keep_checkpoints", 0) or 0)
        self.check_replicas = bool(trainer.get("check_replicas")) and (
            plan.dims.data_parallel == "ddp" and plan.dims.data_parallel_size > 1
        )
        self.accumulation_steps = int(trainer.get("accumulation_steps", 1))
        self.saves = Saves(plan, self)
        self.evaluations = Evaluations(plan, recorder, monitor, self.saves, spikes)
        self.progress = Progress(enabled=recorder.enabled)
        self.loader: ResumableLoader | None = None
        self.syncs = 0
        self.step = 0
        self.stopping = False
        self.last_loss = math.nan
        self.optimizer: Any = None
        self.ranks: list[dict[str, Any]] | None = None
        self._clock: tuple[float, int] | None = None  # (time, images) at the first step
        # The epoch's loss so far as the checkpoint resumed mid-epoch saved it (mesh.json):
        # added to the loop's running sum at the first step, so the epoch's mean is the
        # whole epoch's, as an uninterrupted run reports it.
        self.carried: list[float] | None = None

    # --- what the live config answers --------------------------------------------------

    def checkpoint_interval(self) -> int:
        if self.saves.save_now:
            return 1
        return self.interval or NEVER

    def current_max_steps(self) -> int | None:
        return 0 if self.stopping else self.max_steps

    # --- installation --------------------------------------------------------------------

    @contextlib.contextmanager
    def installed(self, training: Any) -> Iterator[None]:
        from experiments.snn.engines.spikingjelly_cpu import CudaOnCPU, view_of_torch

        on_cpu = self.plan.device == "cpu"
        saved = {name: getattr(training, name) for name in REPLACED}
        training.torch = view_of_torch(
            _HookedCuda(CudaOnCPU() if on_cpu else torch.cuda, self), on_cpu
        )
        training.dist = DistView()
        training._build_loaders = self._loaders(saved["_build_loaders"])
        if self.resume is not None:
            training._load_checkpoint = self._resumed(
                self.resume.wrap(saved["_load_checkpoint"], training)
            )
        training._save_checkpoint, training._finish_checkpoint = self.saves.wrap(
            saved["_save_checkpoint"], saved["_finish_checkpoint"]
        )
        for name in ("_evaluate", "_evaluate_pipeline"):
            setattr(training, name, self.evaluations.wrap(saved[name], self))
        if self.accumulation_steps > 1:
            from experiments.snn.engines.accumulation import Accumulation

            accumulation = Accumulation(self.accumulation_steps)
            loss = saved["_classification_loss"]
            training._forward_classification = accumulation.forward(
                saved["_forward_classification"], loss
            )
            training._classification_loss = accumulation.loss(loss)
        try:
            with mixup_in_the_loops_place(self.plan.trainer, self.plan.training_config):
                yield
        finally:
            for name, value in saved.items():
                setattr(training, name, value)
            self.progress.close()

    def _loaders(self, build: Callable[..., Any]) -> Callable[..., Any]:
        def build_loaders(*args: Any, **kwargs: Any) -> Any:
            train, validation, train_sampler, validation_sampler = build(*args, **kwargs)
            self.loader = ResumableLoader(train)
            return self.loader, validation, train_sampler, validation_sampler

        return build_loaders

    def _resumed(self, load: Callable[..., tuple[int, int, int]]) -> Callable[..., Any]:
        def load_checkpoint(*args: Any, **kwargs: Any) -> tuple[int, int, int]:
            step, epoch, batch = load(*args, **kwargs)
            if self.loader is not None:
                self.loader.skip = batch % len(self.loader)  # the loop's own start_batch
                if not self.loader.skip:  # at an epoch's end: the next epoch starts afresh
                    self.carried = None
            self.saves.saved_step = step
            return step, epoch, batch

        return load_checkpoint

    # --- the step hook ---------------------------------------------------------------------

    def after_synchronize(self, frame: Any) -> None:
        if frame is None or frame.f_code.co_name != "train_classification":
            return
        self.syncs += 1
        if self.syncs % SYNCHRONIZE_CALLS:
            return  # the call before the step
        self._after_step(frame.f_locals)

    def _after_step(self, scope: dict[str, Any]) -> None:
        garbage_collection.end_start_up()  # start-up is over (garbage_collection.py)
        self.saves.save_now = False
        if self.carried is not None:
            if int(scope["dp_rank"]) == 0:  # once: the epoch's end sums the dp ranks' totals
                totals = scope["totals"]  # the loop's own tensor, added to in place
                totals += torch.tensor(self.carried, dtype=totals.dtype, device=totals.device)
            self.carried = None
        step = int(scope["global_step"]) + 1  # the loop increments it right after this call
        self.step = step
        self.optimizer = scope["optimizer"]
        self.evaluations.steps_since += 1
        if self.ranks is None:
            self.ranks = self._placement(scope["model"])
        final = self._final_step(scope)
        if step % self.log_every == 0 or step == final:
            self._log_step(scope, step)
        self.progress.update(step, final, scope["epoch"], self.config.epochs, self.last_loss)
        if self.stop is not None:
            self.stopping = self.stop.requested(collectives.any_true)
        self.saves.save_now = self.stopping or step == final
        every = self.interval or NEVER
        if step % every == 1 % every:  # the step after a periodic save started
            self.saves.prune()
        self.profiler.step()

    def _log_step(self, scope: dict[str, Any], step: int) -> None:
        """The step's loss averaged over the data-parallel ranks (every rank holds its own;
        under PP the loop has broadcast the last stage's), into steps.jsonl and loggers."""
        loss = scope["loss"].detach().to(self.device, torch.float64).clone()
        dp_size = int(scope["dp_size"])
        if dp_size > 1:
            dist.all_reduce(loss, group=scope["dp_group"])
        self.last_loss = loss.item() / dp_size
        now = time.perf_counter()
        images = scope["targets"].numel() * dp_size
        record: dict[str, Any] = {"step": step, "loss": self.last_loss, "time": time.time()}
        if self._clock is None:
            self._clock = (now, step)
        elif step > self._clock[1]:
            record["images_per_second"] = images * (step - self._clock[1]) / (now - self._clock[0])
        if self.check_replicas:
            record["replica_max_diff"] = collectives.replica_spread(
                scope["model"].parameters(), scope["dp_group"]
            )
        self.recorder.log_step(record)

    def _final_step(self, scope: dict[str, Any]) -> int:
        total = self.config.epochs * len(scope["train_loader"])
        return min(total, self.max_steps) if self.max_steps is not None else total

    def _placement(self, model: torch.nn.Module) -> list[dict[str, Any]] | None:
        """Each rank's summary entry with what it holds (gathered once, at the first step)."""
        from torch.distributed.tensor import DTensor

        parameters = list(model.parameters())
        own = {
            "parameters_local": sum(
                p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in parameters
            ),
            "parameters_global": sum(p.numel() for p in parameters),
            "dtensor_parameters": sum(isinstance(p, DTensor) for p in parameters),
        }
        placements = self.recorder.summary.get("ranks") or []
        gathered = collectives.gather(own)
        if len(placements) != len(gathered):
            return None
        return [{**where, **held} for where, held in zip(placements, gathered, strict=True)]

    def learning_rate(self) -> float | None:
        return self.optimizer.param_groups[0]["lr"] if self.optimizer is not None else None


class Saves:
    """The library's checkpoint save, and what we add to it: `mesh.json` beside each
    checkpoint, a full disk as one line, keep_checkpoints, and saves of our own (the best
    evaluation, an early stop) through the same functions."""

    def __init__(self, plan: SNNPlan, hooks: LoopHooks) -> None:
        self.plan = plan
        self.hooks = hooks
        self.root = plan.training_config.checkpoint_dir
        self.save_now = False
        self.saved_step = 0  # the newest step saved into root (or resumed from)
        self.full: Exception | None = None  # a checkpoint write that ran out of space
        self.save: Callable[..., Any] = lambda *a, **k: None
        self.finish: Callable[..., Any] = lambda *a, **k: None
        self.pending_full: Callable[[BaseException], Exception | None] = lambda error: None

    def wrap(self, save: Any, finish: Any) -> tuple[Any, Any]:
        """The library's save (it starts DCP's async_save into `step_N/`) and the wait for
        it. A write that failed for lack of space or quota becomes NoSpaceError (one line, no
        traceback), its cut-short `step_N/` removed so that the records can still be
        written; the newest complete checkpoint stays what resume=auto reads."""
        saving: list[Any] = [None]

        def save_checkpoint(path: Any, *args: Any, **kwargs: Any) -> Any:
            saving[0] = path
            so_far = _epoch_so_far(sys._getframe(1))  # every rank: a collective
            with _one_writer_uncoordinated(kwargs.get("process_group")):
                future = save(path, *args, **kwargs)
            if dist.get_rank() == 0:
                write_mesh(path, self.plan.dims.as_dict(), self.plan.global_batch, so_far)
            if Path(path).parent == self.root:
                self.saved_step = checkpoint_step(Path(path))
            return future

        def finish_checkpoint(*args: Any, **kwargs: Any) -> None:
            try:
                finish(*args, **kwargs)
            except BaseException as error:  # DCP's CheckpointException is one
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                full = no_space_in_save(error, saving[0]) if saving[0] else None
                if full is None:
                    raise
                self.full = full  # the loop's clean-up raises the writer's error again
                raise full from None

        def pending_full(error: BaseException) -> Exception | None:
            """The last step's save, still pending when the loop ends, is awaited by the
            library's own clean-up (not through finish_checkpoint): its error maps here. Only
            a save's own error (DCP's CheckpointException, or an ENOSPC/EDQUOT): any other
            (a peer's lost connection) leaves every checkpoint where it is for the resume."""
            from torch.distributed.checkpoint.api import CheckpointException

            ours = isinstance(error, CheckpointException) or no_space(error) is not None
            if self.full is None and saving[0] is not None and ours:
                self.full = no_space_in_save(error, saving[0])
            return self.full

        self.pending_full = pending_full
        self.save, self.finish = save_checkpoint, finish_checkpoint
        return save_checkpoint, finish_checkpoint

    def save_here(self, scope: dict[str, Any], root: Path) -> Path:
        """The state at this evaluation into `root/step_N/`, written now (the library's own
        save, finished before the loop goes on). Called on every rank alike."""
        device = scope["device"]
        if scope.get("checkpoint_future") is not None:  # the library's save still in flight
            self.finish(scope["checkpoint_future"], device)
        step = int(scope["global_step"])
        path = root / f"step_{step:08d}"
        if dist.get_rank() == 0 and path.exists():  # this step again, after a resume
            shutil.rmtree(path)
        dist.barrier()
        future = self.save(
            path,
            device=device,
            step=step,
            epoch=scope["epoch"],
            batch_in_epoch=scope["batch_index"] + 1,
            process_group=scope["checkpoint_group"],
            config=scope["config"],
            model=scope["model"],
            optimizer=scope["optimizer"],
            scheduler=scope["scheduler"],
            scaler=scope["scaler"],
            tp_rank=scope["tp_rank"],
            pp_rank=scope["pp_rank"],
            dp_rank=scope["dp_rank"],
        )
        self.finish(future, device)
        return path

    def prune(self, root: Path | None = None, keep: int | None = None) -> None:
        keep = self.hooks.keep if keep is None else keep
        if keep and dist.get_rank() == 0:
            remove_all_but_newest(root or self.root, keep)


def _epoch_so_far(caller: Any) -> list[float] | None:
    """At a save by the loop itself: the epoch's running loss sum and sample count (its
    `totals`, each data-parallel rank's own until the epoch ends), summed over the
    data-parallel ranks. None at a save of ours (an evaluation's: the epoch has ended)."""
    if caller.f_code.co_name != "train_classification":
        return None
    scope = caller.f_locals
    totals = scope["totals"].detach().clone()
    if int(scope["dp_size"]) > 1:
        dist.all_reduce(totals, group=scope["dp_group"])
    return [float(totals[0]), float(totals[1])]


def _one_writer_uncoordinated(group: Any) -> contextlib.AbstractContextManager[Any]:
    """While the library's `_save_checkpoint` runs: DCP's `async_save` into a process group
    of one rank (the library gives each model-parallel writer a gloo group of its own) runs
    without DCP's coordination (`no_dist=True`: the same files, one writer, no collectives).
    Measured on CPU ranks (torch 2.14.1, gloo, 2 cores): after a save through the one-rank
    group's object collectives, every later training step of the process ran 25-30 % slower
    (the main job: 0.188 -> 0.245 s/step from its first checkpoint on); uncoordinated, not."""
    import torch.distributed.checkpoint as dcp

    if group is None or dist.get_world_size(group) != 1:
        return contextlib.nullcontext()
    coordinated = dcp.async_save

    def async_save(*args: Any, **kwargs: Any) -> Any:
        return coordinated(*args, **{**kwargs, "no_dist": True})

    return mock.patch.object(dcp, "async_save", async_save)


class Evaluations:
    """After each of the library's validations in the loop: the epoch's record
    (metrics.jsonl, the loggers, the epoch line), then the run's monitor (run/early_stopping:
    early stopping and a search's pruner), whose verdict may keep a best checkpoint, stop
    the run (EarlyStopped) or prune it (Pruned)."""

    def __init__(
        self, plan: SNNPlan, recorder: RunRecorder, monitor: Any, saves: Saves, spikes: Any
    ) -> None:
        self.plan = plan
        self.recorder = recorder
        self.monitor = monitor
        self.saves = saves
        self.spikes = spikes  # the spike and energy measurement (spikingjelly_spikes.py), or None
        self.steps_since = 0  # steps trained since the last evaluation
        self.last: dict[str, Any] | None = None  # the newest epoch record
        self._timed = (0.0, 0)  # the library's training seconds and images at the last one

    def wrap(self, evaluate: Callable[..., Any], hooks: LoopHooks) -> Callable[..., Any]:
        def evaluate_and_record(*args: Any, **kwargs: Any) -> tuple[float, float]:
            if hooks.stopping:  # agreed on every rank: no rank enters its collectives
                return math.nan, math.nan
            if self.steps_since == 0:  # after the loop (resumed at its last step): not an epoch
                return evaluate(*args, **kwargs)
            self.steps_since = 0
            val_loss, val_accuracy = evaluate(*args, **kwargs)
            scope = sys._getframe(1).f_locals  # train_classification's
            self.after(scope, val_loss, val_accuracy, hooks.learning_rate())
            return val_loss, val_accuracy

        return evaluate_and_record

    def after(self, scope: dict[str, Any], val_loss: float, val_accuracy: float, lr: Any) -> None:
        step, epoch = int(scope["global_step"]), int(scope["epoch"]) + 1
        seconds, images = float(scope["training_seconds"]), int(scope["processed_images"])
        timed = seconds - self._timed[0]
        memory = collectives.gather(peak_memory_mb(scope["device"]))
        record = {
            "step": step,
            "epoch": epoch,
            # the library's: the epoch's sample-weighted mean over all data-parallel ranks
            "train_loss": float(scope["train_loss"]),
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "images_per_second": (images - self._timed[1]) / timed if timed > 0 else None,
            "peak_memory_mb": max(memory),
            "peak_memory_mb_per_rank": memory,
            "lr": lr,
        }
        self._timed = (seconds, images)
        measured, stop = (
            self.spikes.after_evaluation(scope, step, epoch) if self.spikes else (None, None)
        )
        if measured is not None:
            from experiments.snn.spikes import METRICS

            record.update({key: measured[key] for key in METRICS})
            self.spikes.log(self.recorder, measured, step)
        self.last = record
        self.recorder.log_metrics(record)
        if self.recorder.enabled:
            from tqdm import tqdm

            rate = f" firing_rate={measured['firing_rate']:.4f}" if measured else ""
            tqdm.write(
                f"epoch {epoch}: val_accuracy={val_accuracy:.4f} val_loss={val_loss:.4f}{rate}"
            )
        if stop:
            from experiments.snn.spikes import DeadLayer

            raise DeadLayer(stop)
        if not self.monitor.active:
            return
        verdict = self.monitor.after_evaluation(step, epoch, record)  # may raise Pruned
        if verdict.improved:
            best = self.saves.save_here(scope, self.saves.root / BEST)
            self.saves.prune(best.parent, keep=1)
            self.monitor.kept(best)
        if verdict.stop:
            if self.saves.saved_step != step:
                self.saves.save_here(scope, self.saves.root)
                self.saves.prune()
            log.warning("early stopping at step %d (epoch %d)", step, epoch)
            raise EarlyStopped


class ResumableLoader:
    """The library's training loader; after a resume mid-epoch, the first epoch's trained
    batches are placeholders the loop skips (it `continue`s past them unread) and the rest
    comes from the sampler's order past them, so nothing trained is loaded again
    (data_position.py)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.skip = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        from experiments.snn.engines.data_position import batches_from

        skip, self.skip = self.skip, 0
        if not skip:
            yield from self.loader
            return
        for _ in range(skip):
            yield None, None  # the loop skips these batch indices without reading them
        yield from batches_from(self.loader, skip)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class Progress:
    """A progress bar on rank 0 (steps, epoch, the last logged loss); between redraws an
    update is a counter, so it costs nothing per step."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def update(self, step: int, total: int, epoch: int, epochs: int, loss: float) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=step - 1,
                unit="step",
                dynamic_ncols=True,
                mininterval=1.0 if sys.stderr.isatty() else 15.0,
            )
        self.bar.set_description(f"epoch {epoch + 1}/{epochs}", refresh=False)
        if not math.isnan(loss):
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def peak_memory_mb(device: torch.device) -> float:
    """This rank's peak: CUDA memory allocated on a GPU, the process's peak RSS on a CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class DistView(types.SimpleNamespace):
    """torch.distributed for the library's module, with `new_group` keeping torch 2.14's
    group counter the same on every rank.

    The loop creates one checkpoint group per model-parallel rank with
    `use_local_synchronization=True`; torch 2.14 increments `_world.group_count` for the
    members only (non-members return first), so the next group's name differs between ranks.
    Measured with gloo, dp=2 x tp=2: every rank waits forever in the next `new_group` (the
    memopt stage group). Non-members advance the counter as members do (what torch's own
    comment in `_process_group_name` says the counter is for)."""

    def new_group(self, ranks: Any = None, *args: Any, **kwargs: Any) -> Any:
        group = dist.new_group(ranks, *args, **kwargs)
        local = kwargs.get("use_local_synchronization") and ranks is not None
        if local and dist.get_rank() not in ranks:
            import torch.distributed.distributed_c10d as c10d

            c10d._world.group_count += 1
        return group

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)


class _HookedCuda:
    """`torch.cuda` (or its CPU mapping) whose synchronize also calls the step hook."""

    def __init__(self, base: Any, hooks: LoopHooks) -> None:
        self._base = base
        self._hooks = hooks

    def synchronize(self, *args: Any, **kwargs: Any) -> None:
        self._base.synchronize(*args, **kwargs)
        self._hooks.after_synchronize(sys._getframe(1))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def mixup_in_the_loops_place(
    trainer: dict[str, Any], config: Any
) -> contextlib.AbstractContextManager[Any]:
    """Where the run mixes beyond what the loop's v2.MixUp does (snn/mixup.py), the object
    the loop builds as `v2.MixUp(alpha=..., num_classes=...)` is timm's Mixup with the run's
    keys; its call site, soft targets and loss stay the loop's."""
    from experiments.snn import mixup

    if not mixup.timm_reasons(trainer, config.input_layout):
        return contextlib.nullcontext()
    from torchvision.transforms import v2

    def build(alpha: float, num_classes: int) -> mixup.TimmMixup:
        assert alpha == trainer["mixup_alpha"], (alpha, trainer["mixup_alpha"])
        return mixup.TimmMixup(trainer, num_classes, config.seed)

    return mock.patch.object(v2, MIXUP_BUILT, build)


def _live_config(config: Any, hooks: LoopHooks) -> Any:
    """A copy of the frozen TrainingConfig whose checkpoint_interval and max_steps are asked
    of the hooks each time the loop reads them. It serialises exactly like the original
    (same fields, same `_target_`), so the library's config.json and its resume check see
    the user's recipe."""
    base = type(config)

    class LiveTrainingConfig(base):  # type: ignore[misc, valid-type]
        def __getattribute__(self, name: str) -> Any:
            if name == "checkpoint_interval":
                return hooks.checkpoint_interval()
            if name == "max_steps":
                return hooks.current_max_steps()
            return object.__getattribute__(self, name)

    LiveTrainingConfig.__module__ = base.__module__
    LiveTrainingConfig.__qualname__ = base.__qualname__
    LiveTrainingConfig.__name__ = base.__name__
    live = dataclasses.replace(config)
    object.__setattr__(live, "__class__", LiveTrainingConfig)
    return live
