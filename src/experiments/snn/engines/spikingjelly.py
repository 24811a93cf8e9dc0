"""SpikingJelly's own `train_classification`, on CUDA ranks (NCCL) or on CPU ranks (gloo).

Nothing of the training is ours: the library builds the mesh, the model, the loaders, runs
its loop and writes its checkpoints (`<run>/checkpoints/step_N/`: config.json and one DCP
folder per (pp, tp) rank). What is ours, around it:

- the process group: initialised here before the loop (gloo on CPU, NCCL on CUDA), so a
  single-process run needs no launcher (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT are set for
  it) and we can agree on things across ranks before the loop starts;
- on CPU, its CUDA-only calls mapped to CPU inside this process (spikingjelly_cpu.py);
- resume: rank 0 picks the newest complete checkpoint (`.metadata` in every pp_*_tp_*
  folder) and broadcasts it; torn folders are removed with one line each; resume=null
  clears old step folders; metrics.jsonl/steps.jsonl are cut back to the resumed step;
- a step hook (spikingjelly_loop.py): steps.jsonl and the loggers' train/loss every
  log_every_n_steps, check_replicas, keep_checkpoints, a checkpoint at the last step and at
  SIGTERM/SIGUSR2 (then the run ends `interrupted`), through the names the loop looks up;
- its per-epoch JSON lines (loguru, rank 0) into metrics.jsonl and the loggers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from experiments import distributed_env
from experiments.run.record import NoSpaceError, RunRecorder
from experiments.run.stop import GracefulStop
from experiments.snn.engines.spikingjelly_checkpoints import checkpoint_step, scan_checkpoints
from experiments.snn.plan import SNNPlan

log = logging.getLogger(__name__)


def _decide_resume(plan: SNNPlan) -> Path | None:
    """Rank 0's decision, taken before any rank trains (the others get it by broadcast).

    resume=auto: the newest complete checkpoint. Torn folders (newer or not) are removed, one
    line each: the library raises FileExistsError when it reaches a step whose folder exists.
    resume=null: every step folder goes (a fresh start must not meet its old checkpoints).
    resume=<dir>: that checkpoint."""
    root = plan.training_config.checkpoint_dir
    assert root is not None
    if plan.resume is None:
        if root.exists():
            shutil.rmtree(root)
        return None
    if plan.resume != "auto":
        return Path(plan.resume)
    complete, torn = scan_checkpoints(root, plan.dims.pipeline_parallel_size
                                      * plan.dims.tensor_parallel_size)  # fmt: skip
    for folder, reason in torn:
        log.warning("skipping torn checkpoint %s (%s); removed", folder, reason)
        shutil.rmtree(folder, ignore_errors=True)
    return complete[0] if complete else None


# --- process group ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def single_process_env() -> dict[str, str]:
    """What env:// needs when nothing launched ranks (launcher=local, one process): this
    process is rank 0 of 1. Keys already set (torchrun, a Slurm task) are left alone."""
    values = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
    }
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


def _broadcast(value: Any) -> Any:
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def _gather(value: Any) -> list[Any]:
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def peak_memory_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- the library's per-epoch lines --------------------------------------------------------


def _metrics_sink(recorder: RunRecorder, hooks: Any) -> Any:
    """SpikingJelly logs (through loguru) one JSON object per epoch on rank 0. The line of
    an epoch cut short by a stop signal is not an epoch's record: it is dropped."""

    def sink(message: Any) -> None:
        try:
            value = json.loads(message.record["message"])
        except ValueError:
            return
        if not isinstance(value, dict) or "validation_accuracy" not in value:
            return
        if hooks.stopping:
            return
        try:
            _log_epoch(recorder, hooks, value)
        except NoSpaceError as error:  # loguru would print a traceback and go on
            hooks.full = hooks.full or error  # the engine ends the run with it, in one line

    return sink


def _log_epoch(recorder: RunRecorder, hooks: Any, value: dict[str, Any]) -> None:
    recorder.log_metrics(
        {
            "step": value["optimizer_step"],
            "epoch": value["epoch"],
            # the library's: the epoch's sample-weighted mean over all data-parallel ranks
            "train_loss": value["train_loss"],
            "val_loss": value["validation_loss"],
            "val_accuracy": value["validation_accuracy"],
            "lr": hooks.learning_rate(),
        }
    )


@contextlib.contextmanager
def _library_log(recorder: RunRecorder, hooks: Any):
    from spikingjelly.logger import logger

    logger.enable("spikingjelly")
    sink_id = logger.add(
        _metrics_sink(recorder, hooks),
        level="INFO",
        filter=lambda record: record["name"].startswith("spikingjelly"),
    )
    try:
        yield
    finally:
        logger.remove(sink_id)


# --- the run ------------------------------------------------------------------------------


def train(plan: SNNPlan, recorder: RunRecorder) -> dict[str, Any]:
    from spikingjelly.activation_based.distributed.vision import training

    from experiments.snn.engines.spikingjelly_loop import LoopHooks

    initialized_here = _init_process_group(plan.device)
    device = distributed_env.collective_device()  # NCCL: this rank's GPU; gloo: CPU
    from experiments.launchers.local import is_sweep_point  # Ctrl-C at a local sweep

    graceful = distributed_env.in_slurm_job() or is_sweep_point()  # as the CPU engine
    stop = GracefulStop().install() if graceful else None
    try:
        decided = _decide_resume(plan) if dist.get_rank() == 0 else None
        resume = _broadcast(str(decided) if decided is not None else None)
        config = plan.training_config
        if resume is not None:
            config = dataclasses.replace(config, resume=Path(resume))
            step = checkpoint_step(Path(resume))
            recorder.truncate_logs(after_step=max(step, 0))
            recorder.summary["resumed_from"] = resume
            recorder.summary["resumes"] = recorder.summary.get("resumes", 0) + 1
            log.info("resuming SpikingJelly's loop from %s", resume)
        else:
            recorder.truncate_logs(after_step=0)
        recorder.summary["ranks"] = ranks = _gather(_placement(plan))
        recorder.summary["restarts"] = distributed_env.restarts(ranks)
        dist.barrier()  # rank 0's clean-up is done before any rank looks at the folders

        hooks = LoopHooks(plan, recorder, config, device, stop)
        mapping = contextlib.nullcontext()
        if plan.device == "cpu":
            from experiments.snn.engines.spikingjelly_cpu import cpu_mapping

            mapping = cpu_mapping()
        try:
            with mapping, hooks.installed(training), _library_log(recorder, hooks):
                result = training.train_classification(hooks.config)
        except BaseException:  # DCP's CheckpointException too
            if hooks.full is not None:  # not the writer's error its clean-up raised again
                raise hooks.full from None
            raise
        if hooks.full is not None:  # an epoch's record did not fit (the loop went on)
            raise hooks.full
        hooks.prune()
        if hooks.ranks is not None:
            recorder.summary["ranks"] = hooks.ranks
        memory = _gather(peak_memory_mb())
        if hooks.stopping:
            assert stop is not None
            log.warning("stopping at step %d on signal %s; checkpoint saved", hooks.step,
                        stop.received)  # fmt: skip
            stop.hand_over()
    finally:
        if stop is not None:
            stop.restore()
        if initialized_here and dist.is_initialized():
            dist.destroy_process_group()
    peak = result["peak_memory_bytes"] / 2**20 if plan.device == "cuda" else max(memory)
    return {
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
