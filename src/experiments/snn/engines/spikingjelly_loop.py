"""A step hook in SpikingJelly's `train_classification`, which has no hooks or callbacks.

The loop calls `torch.cuda.synchronize(device)` exactly twice per optimizer step, on every
rank and in every topology (before the step's timer starts, and after the optimizer and
scheduler steps, before `global_step += 1` and its checkpoint test). Its module's `torch`
name is replaced, while the loop runs in this process, by a view whose `cuda.synchronize`
calls the real one (or the CPU no-op) and then, on the second call of each step, our hook
with the loop's frame. The hook reads the step's locals (`global_step`, `loss`, `model`,
`optimizer`, `dp_group`, `dp_size`, `train_loader`) and, on every rank alike:

- every `log_every_n_steps` (and at the last step): the step's loss averaged over the
  data-parallel ranks into steps.jsonl and the loggers' train/loss, with
  `replica_max_diff` when check_replicas is set;
- with a stop signal installed (Slurm tasks): agrees on it across ranks (one all-reduce);
- decides whether this step is saved: at the last step (the library saves only every
  `checkpoint_interval` steps) and at an agreed stop. The library's own `_save_checkpoint`
  then writes it, because its test `global_step % config.checkpoint_interval == 0` reads
  a config whose `checkpoint_interval` answers 1 for that step (`_live_config`); at a stop,
  `max_steps` answers 0 so the loop breaks right after the save, and its end-of-epoch
  validation is skipped (`_evaluate*` answer NaN; that line is not recorded);
- keep_checkpoints: rank 0 removes complete checkpoints beyond the newest N;
- a checkpoint write that runs out of space or quota ends the run in one line
  (NoSpaceError), its cut-short `step_N/` removed (`_space_checked`).

A stop therefore loses nothing: the checkpoint is of the step during which the signal came.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from experiments.run.record import STEPS, RunRecorder, append_jsonl
from experiments.run.stop import GracefulStop
from experiments.snn.plan import SNNPlan

log = logging.getLogger(__name__)
NEVER = 2**62  # a checkpoint interval no run reaches: the library keeps its checkpoint groups
_SAVES = ("_save_checkpoint", "_finish_checkpoint")


class LoopHooks:
    def __init__(
        self,
        plan: SNNPlan,
        recorder: RunRecorder,
        config: Any,
        device: torch.device,
        stop: GracefulStop | None,
    ) -> None:
        self.plan = plan
        self.recorder = recorder
        self.device = device
        self.stop = stop
        self.interval = config.checkpoint_interval
        self.max_steps = config.max_steps
        self.config = _live_config(config, self)
        self.log_every = int(plan.trainer.get("log_every_n_steps", 1))
        self.keep = int(plan.trainer.get("keep_checkpoints", 0) or 0)
        self.check_replicas = bool(plan.trainer.get("check_replicas")) and (
            plan.dims.data_parallel == "ddp" and plan.dims.data_parallel_size > 1
        )
        self.syncs = 0
        self.step = 0
        self.save_now = False
        self.stopping = False
        self.last_loss = math.nan
        self.optimizer: Any = None
        self.ranks: list[dict[str, Any]] | None = None
        self.full: Exception | None = None  # a checkpoint write that ran out of space
        self._started = time.perf_counter()
        self._timed = 0.0

    # --- what the live config answers --------------------------------------------------

    def checkpoint_interval(self) -> int:
        if self.save_now:
            return 1
        return self.interval or NEVER

    def current_max_steps(self) -> int | None:
        return 0 if self.stopping else self.max_steps

    # --- installation --------------------------------------------------------------------

    @contextlib.contextmanager
    def installed(self, training: Any) -> Iterator[None]:
        from experiments.snn.engines.spikingjelly_cpu import CudaOnCPU, view_of_torch

        on_cpu = self.plan.device == "cpu"
        cuda = _HookedCuda(CudaOnCPU() if on_cpu else torch.cuda, self)
        names = ("torch", "dist", "_evaluate", "_evaluate_pipeline")
        saved = {name: getattr(training, name) for name in (*names, *_SAVES)}
        training.torch = view_of_torch(cuda, on_cpu)
        training.dist = DistView()
        training._evaluate = self._skipped_when_stopping(saved["_evaluate"])
        training._evaluate_pipeline = self._skipped_when_stopping(saved["_evaluate_pipeline"])
        training._save_checkpoint, training._finish_checkpoint = self._space_checked(
            saved["_save_checkpoint"], saved["_finish_checkpoint"]
        )
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(training, name, value)

    def _space_checked(self, save: Any, finish: Any) -> tuple[Any, Any]:
        """The library's checkpoint save (it starts DCP's async_save into `step_N/`) and the
        wait for it: a write that failed for lack of space or quota becomes NoSpaceError
        (one line, no traceback), its cut-short `step_N/` removed so that the records can
        still be written; the newest complete checkpoint stays what resume=auto reads."""
        from experiments.snn.engines.spikingjelly_checkpoints import no_space_in_save

        saving: list[Any] = [None]

        def save_checkpoint(path: Any, *args: Any, **kwargs: Any) -> Any:
            saving[0] = path
            return save(path, *args, **kwargs)

        def finish_checkpoint(*args: Any, **kwargs: Any) -> None:
            try:
                finish(*args, **kwargs)
            except BaseException as error:  # DCP's CheckpointException is one
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                dims = self.plan.dims
                shards = dims.pipeline_parallel_size * dims.tensor_parallel_size
                full = no_space_in_save(error, saving[0], shards) if saving[0] else None
                if full is None:
                    raise
                self.full = full  # the loop's clean-up raises the writer's error again
                raise full from None

        return save_checkpoint, finish_checkpoint

    def _skipped_when_stopping(self, evaluate: Any) -> Any:
        def evaluate_unless_stopping(*args: Any, **kwargs: Any) -> tuple[float, float]:
            if self.stopping:  # agreed on every rank: no rank enters its collectives
                return math.nan, math.nan
            return evaluate(*args, **kwargs)

        return evaluate_unless_stopping

    # --- the hook --------------------------------------------------------------------------

    def after_synchronize(self, frame: Any) -> None:
        if frame is None or frame.f_code.co_name != "train_classification":
            return
        self.syncs += 1
        if self.syncs % 2:
            return  # the call before the step
        self._after_step(frame.f_locals)

    def _after_step(self, scope: dict[str, Any]) -> None:
        self.save_now = False
        step = int(scope["global_step"]) + 1  # the loop increments it right after this call
        self.step = step
        self.optimizer = scope["optimizer"]
        if self.ranks is None:
            self.ranks = self._placement(scope["model"])
        final = self._final_step(scope)
        if step % self.log_every == 0 or step == final:
            self._log_step(scope, step)
        if self.stop is not None:
            flag = torch.tensor(int(self.stop.received is not None), device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            self.stopping = bool(flag.item())
        self.save_now = self.stopping or step == final
        every = self.interval or NEVER
        if step % every == 1 % every:  # the step after a periodic save started
            self.prune()

    def _log_step(self, scope: dict[str, Any], step: int) -> None:
        """The step's loss averaged over the data-parallel ranks (every rank holds its own;
        under PP the loop has broadcast the last stage's), into steps.jsonl and loggers."""
        loss = scope["loss"].detach().to(self.device, torch.float64).clone()
        dp_size = int(scope["dp_size"])
        if dp_size > 1:
            dist.all_reduce(loss, group=scope["dp_group"])
        self.last_loss = loss.item() / dp_size
        record: dict[str, Any] = {"step": step, "loss": self.last_loss, "time": time.time()}
        if self.check_replicas:
            record["replica_max_diff"] = _replica_spread(
                scope["model"], scope["dp_group"], dp_size, self.device
            )
        self.recorder.scalar("train/loss", self.last_loss, step)
        if self.recorder.enabled:
            append_jsonl(self.plan.run_dir / STEPS, record)

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
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, own)
        if len(placements) != len(gathered):
            return None
        return [{**where, **held} for where, held in zip(placements, gathered, strict=True)]

    def learning_rate(self) -> float | None:
        return self.optimizer.param_groups[0]["lr"] if self.optimizer is not None else None

    def prune(self) -> None:
        """keep_checkpoints: rank 0 removes complete checkpoints beyond the newest N (an
        in-flight one has no .metadata yet: it is neither counted nor touched)."""
        if not self.keep or dist.get_rank() != 0:
            return
        from experiments.snn.engines.spikingjelly_checkpoints import scan_checkpoints

        root = self.plan.training_config.checkpoint_dir
        dims = self.plan.dims
        complete, _ = scan_checkpoints(
            root, dims.pipeline_parallel_size * dims.tensor_parallel_size
        )
        for old in complete[self.keep :]:
            import shutil

            shutil.rmtree(old, ignore_errors=True)


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


def _replica_spread(model: torch.nn.Module, group: Any, size: int, device: torch.device) -> float:
    """Largest difference of any parameter sum across data-parallel replicas."""
    sums = torch.stack([p.detach().double().sum() for p in model.parameters()]).to(device)
    gathered = [torch.empty_like(sums) for _ in range(size)]
    dist.all_gather(gathered, sums, group=group)
    stacked = torch.stack(gathered)
    return (stacked.max(0).values - stacked.min(0).values).abs().max().item()


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
