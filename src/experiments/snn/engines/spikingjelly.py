"""The SNN engine: SpikingJelly's own `train_classification`, on CUDA ranks (NCCL) or on CPU
ranks (gloo), for every topology (docs/engines.md).

The process group is initialised here before the loop, so a single-process run needs no
launcher and ranks can agree on things (which checkpoint resumes: rank 0 lists the complete
ones and broadcasts them) before the loop starts. What the loop's seam adds is in
spikingjelly_loop.py; loading and resharding in spikingjelly_resume.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from experiments import collectives, distributed_env
from experiments.run.early_stopping import Monitor
from experiments.run.record import METRICS, RunRecorder, read_jsonl
from experiments.run.stop import GracefulStop
from experiments.snn.engines.profiling import StepProfiler, summary_metrics
from experiments.snn.engines.spikingjelly_checkpoints import (
    BEST,
    read_mesh,
    remove_newer_than,
    scan_checkpoints,
)
from experiments.snn.plan import SNNPlan

log = logging.getLogger(__name__)


def _candidates(plan: SNNPlan) -> list[str]:
    """Rank 0's decision, taken before any rank trains (the others get it by broadcast).

    resume=auto: the complete checkpoints, newest first. Torn folders (newer or not) are
    removed, one line each: the library raises FileExistsError when it reaches a step whose
    folder exists. resume=null: every step folder goes (a fresh start must not meet its old
    checkpoints). resume=<dir>: that checkpoint."""
    root = plan.training_config.checkpoint_dir
    assert root is not None
    if plan.resume is None:
        if root.exists():
            shutil.rmtree(root)
        return []
    if plan.resume != "auto":
        return [str(plan.resume)]
    complete, torn = scan_checkpoints(root)
    for folder, reason in torn:
        log.warning("skipping torn checkpoint %s (%s); removed", folder, reason)
        shutil.rmtree(folder, ignore_errors=True)
    return [str(path) for path in complete]


# --- process group ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def single_process_env() -> dict[str, str]:
    """What env:// needs when nothing launched ranks (launcher=local, one process): this
    process is rank 0 of 1. Keys already set (torchrun, a Slurm task) are left alone."""
    values = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    added = {key: value for key, value in values.items() if key not in os.environ}
    if "MASTER_PORT" not in os.environ:
        added["MASTER_PORT"] = str(_free_port())
    return added


def _init_process_group(device: str) -> bool:
    """The group the library's loop then uses as its own. True if created here."""
    if dist.is_initialized():
        return False
    added = single_process_env() if "WORLD_SIZE" not in os.environ else {}
    os.environ.update(added)
    if device == "cuda":
        local = torch.device("cuda", distributed_env.local_rank())
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=local)
    else:
        distributed_env.init_process_group("gloo")
    return True


# --- the run ------------------------------------------------------------------------------


def train(plan: SNNPlan, recorder: RunRecorder) -> dict[str, Any]:
    initialized_here = _init_process_group(plan.device)
    from experiments import role  # Slurm's signals; Ctrl-C at a local sweep

    stop = GracefulStop().install() if role.of_process().stops_gracefully else None
    try:
        return _Run(plan, recorder, stop).train()
    finally:
        if stop is not None:
            stop.restore()
        if initialized_here and dist.is_initialized():
            dist.destroy_process_group()


class _Run:
    def __init__(self, plan: SNNPlan, recorder: RunRecorder, stop: GracefulStop | None) -> None:
        from experiments.snn.engines.spikingjelly_loop import LoopHooks
        from experiments.snn.engines.spikingjelly_resume import Resume

        self.plan = plan
        self.recorder = recorder
        self.stop = stop
        candidates = [
            Path(p)
            for p in collectives.broadcast_from_rank0(
                _candidates(plan) if dist.get_rank() == 0 else None
            )
        ]
        config = plan.training_config
        resume = None
        if candidates:
            config = dataclasses.replace(config, resume=candidates[0])
            resume = Resume(
                candidates,
                plan.dims.data_parallel_size,
                bool(plan.trainer.get("allow_global_batch_change", False)),
                self._loaded,
            )
        else:
            recorder.truncate_logs(after_step=0)
        recorder.summary["ranks"] = ranks = collectives.gather(_placement(plan))
        recorder.summary["restarts"] = distributed_env.restarts(ranks)
        dist.barrier()  # rank 0's clean-up is done before any rank looks at the folders
        self.monitor = Monitor.for_plan(
            plan, recorder.summary, agree=collectives.broadcast_from_rank0
        )
        self.profiler = StepProfiler(
            int(plan.trainer.get("profile_steps", 0) or 0), plan.run_dir, dist.get_rank()
        )
        self.spikes = None
        if plan.spikes is not None and plan.spikes.active:
            from experiments.snn.engines.spikingjelly_spikes import LoopSpikes

            self.spikes = LoopSpikes(plan.spikes, plan, records=[])
        self.hooks = LoopHooks(
            plan,
            recorder,
            config,
            distributed_env.collective_device(),
            stop,
            self.monitor,
            self.profiler,
            resume,
            self.spikes,
        )

    def _loaded(self, path: Path, step: int) -> None:
        """Every rank loaded `path` (at `step`): the records and the checkpoints go back to that
        step, and the monitor replays the evaluations the records keep (its best, its
        patience count)."""
        root = self.plan.training_config.checkpoint_dir
        if dist.get_rank() == 0:
            for folder in remove_newer_than(root, step):
                log.warning("removed %s: newer than the checkpoint resumed (step %d)", folder, step)
        dist.barrier()
        self.recorder.truncate_logs(after_step=max(step, 0))
        if self.spikes is not None and dist.get_rank() == 0:
            from experiments.snn.engines.spikingjelly_spikes import records_up_to

            self.spikes.resume(records_up_to(self.plan.run_dir, step))
        self.hooks.carried = (read_mesh(path) or {}).get("epoch_so_far")  # mid-epoch: its loss
        self.recorder.summary["resumed_from"] = str(path)
        self.recorder.summary["resumes"] = self.recorder.summary.get("resumes", 0) + 1
        log.info("resuming SpikingJelly's loop from %s", path)
        if self.monitor.active:
            kept = read_jsonl(self.plan.run_dir / METRICS)[0] if dist.get_rank() == 0 else None
            self.monitor.replay(collectives.broadcast_from_rank0(kept))
            best = root / BEST / f"step_{self.monitor.best_step or 0:08d}"
            if self.monitor.best_step is not None and best.is_dir():
                self.monitor.kept(best)

    def train(self) -> dict[str, Any]:
        from spikingjelly.activation_based.distributed.vision import training

        from experiments.snn.engines.spikingjelly_loop import EarlyStopped

        plan, hooks = self.plan, self.hooks
        mapping: Any = contextlib.nullcontext()
        if plan.device == "cpu":
            from experiments.snn.engines.spikingjelly_cpu import cpu_mapping, keep_freed_memory

            keep_freed_memory()
            mapping = cpu_mapping()
        result = None
        try:
            with mapping, hooks.installed(training):
                self.profiler.start()
                result = training.train_classification(hooks.config)
        except EarlyStopped:
            pass
        except BaseException as error:  # DCP's CheckpointException too
            if self.spikes is not None:
                self.spikes.close()  # ended short: the figure child finishes on its own
            full = hooks.saves.full
            if full is None and not isinstance(error, (KeyboardInterrupt, SystemExit)):
                full = hooks.saves.pending_full(error)  # the last step's, awaited at clean-up
            if full is not None:  # a full disk, not the writer's error its clean-up raised
                raise full from None
            raise
        finally:
            self.profiler.stop()
        if hooks.saves.full is not None:  # an epoch's record did not fit (the loop went on)
            raise hooks.saves.full
        hooks.saves.prune()
        if hooks.ranks is not None:
            self.recorder.summary["ranks"] = hooks.ranks
        metrics = self._metrics(result)
        if self.spikes is not None and self.recorder.enabled:
            self.spikes.draw(self.recorder)
        if hooks.stopping:
            assert self.stop is not None
            log.warning(
                "stopping at step %d on signal %s; checkpoint saved", hooks.step, self.stop.received
            )
            self.stop.hand_over()
        return metrics

    def _metrics(self, result: dict[str, Any] | None) -> dict[str, Any]:
        """The run's metrics: the library's result, or (stopped early) the last epoch's."""
        from experiments.snn.engines.spikingjelly_loop import peak_memory_mb

        hooks, plan = self.hooks, self.plan
        memory = collectives.gather(peak_memory_mb(hooks.device))
        profile = summary_metrics(collectives.gather(self.profiler.digest))
        last = hooks.evaluations.last or {}
        if result is None or math.isnan(result["validation_accuracy"]):
            result = {
                "validation_accuracy": last.get("val_accuracy", math.nan),
                "validation_loss": last.get("val_loss", math.nan),
                "train_loss": last.get("train_loss", math.nan),
                "images_per_second": last.get("images_per_second") or math.nan,
                "optimizer_step": hooks.step,
                "global_batch_size": plan.global_batch,
                "peak_memory_bytes": 0.0,
            }
        peak = result["peak_memory_bytes"] / 2**20 if plan.device == "cuda" else max(memory)
        from experiments.snn.spikes import METRICS

        return {
            **{key: last[key] for key in METRICS if key in last},
            "val_accuracy": result["validation_accuracy"],
            "val_loss": result["validation_loss"],
            # SpikingJelly's train_loss: the last epoch's mean (not the last step's loss)
            "train_loss": result["train_loss"],
            "train_loss_kind": "last epoch mean",
            "last_step_loss": hooks.last_loss,
            "images_per_second": result["images_per_second"],
            "steps": int(result["optimizer_step"]),
            "global_batch": int(result["global_batch_size"]),
            "peak_memory_mb": peak,
            "peak_memory_mb_per_rank": memory,
            **profile,
            "library_result": result,
        }


def _placement(plan: SNNPlan) -> dict[str, Any]:
    rank = dist.get_rank()
    dp, pp, tp = plan.dims.coordinates(rank)
    return {
        **distributed_env.placement(),
        "rank": rank,
        "coordinates": {"dp": dp, "pp": pp, "tp": tp},
    }
