"""CPU engine for SNN classification: the same TrainingConfig SpikingJelly's trainer takes.

SpikingJelly's `train_classification` needs CUDA and NCCL. This engine runs its pieces on CPU
ranks instead of re-implementing them: the config's ModelBuilder builds the (TP-sharded,
pipeline-split) model, SpikingJelly's loaders shard the data, its execution helpers run forward
and loss, `functional.reset_net` resets neuron state, its `_evaluate`/`_evaluate_pipeline`
compute validation metrics, torch's DDP / `fully_shard` / `torch.distributed.pipelining` run
the topology over gloo (cpu_parallel.py). What is ours: the loop, the progress bar,
checkpoints in the run directory and the record.
"""

from __future__ import annotations

import logging
import math
import resource
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from spikingjelly.activation_based import functional
from spikingjelly.activation_based.distributed.vision import training as sj_training
from spikingjelly.activation_based.distributed.vision.execution import (
    _classification_loss,
    _classification_sequence,
    _forward_classification,
)
from spikingjelly.activation_based.precision import prepare_model_for_precision
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from tqdm import tqdm

from experiments import distributed_env
from experiments.run import checkpoint
from experiments.run.early_stopping import BEST, Monitor
from experiments.run.record import STEPS, RunRecorder, append_jsonl
from experiments.run.stop import GracefulStop
from experiments.snn import reshard
from experiments.snn.engines.cpu_parallel import (
    DEVICE,
    ParallelContext,
    pipeline_schedules,
    wrap_data_parallel,
)
from experiments.snn.engines.data_position import batches_from
from experiments.snn.engines.profiling import StepProfiler, summary_metrics
from experiments.snn.plan import CHECKPOINT_DIRNAME, SNNPlan

log = logging.getLogger(__name__)
FULL_STATE = StateDictOptions(full_state_dict=True)

# SpikingJelly's loaders always ask for pinned memory; there is nothing to pin on a CPU run.
warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true.*")


def peak_memory_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train(plan: SNNPlan, recorder: RunRecorder) -> dict[str, Any]:
    context = ParallelContext.setup(plan.dims)
    from experiments.launchers.local import is_sweep_point  # Ctrl-C at a local sweep

    graceful = distributed_env.in_slurm_job() or is_sweep_point()
    stop = GracefulStop().install() if graceful else None
    try:
        return _Trainer(plan, recorder, context, stop).fit()
    finally:
        if stop is not None:
            stop.restore()
        context.close()


class _Trainer:
    def __init__(
        self,
        plan: SNNPlan,
        recorder: RunRecorder,
        context: ParallelContext,
        stop: GracefulStop | None = None,
    ) -> None:
        self.stop = stop
        self.plan = plan
        self.recorder = recorder
        self.context = context
        self.config = config = plan.training_config
        dims = plan.dims
        torch.manual_seed(config.seed)
        builder = config.model.get_builder_cls()(config.model)
        model, fsdp_roots, _, _ = builder.build(
            process_group=context.tp_group,
            memopt_process_group=None,
            pipeline_rank=context.pp_rank,
            pipeline_size=dims.pipeline_parallel_size,
            pipeline_microbatches=dims.pipeline_microbatches,
            device=DEVICE,
            micro_batch_size=config.batch_size,
            memopt_level=0,
            memopt_compress_inputs=False,
            memopt_checkpoint_budget="memory",
        )
        functional.set_step_mode(model, config.model.step_mode)
        self.precision = prepare_model_for_precision(model, DEVICE, config.precision)
        self.model = wrap_data_parallel(
            self.precision.model, context, config.model.step_mode, config.precision, fsdp_roots
        )
        self.loss_function = sj_training._build_loss_function(config)
        self.train_schedule = self.eval_schedule = None
        if dims.pipeline_parallel_size > 1:
            self.train_schedule, self.eval_schedule = pipeline_schedules(
                self.model, context, self.loss_function
            )
        self.optimizer = sj_training._import_object(config.optimizer)(
            self.model.parameters(), **config.optimizer_kwargs
        )
        self.scheduler = (
            sj_training._import_object(config.scheduler)(self.optimizer, **config.scheduler_kwargs)
            if config.scheduler
            else None
        )
        self.train_loader, self.val_loader, self.train_sampler, _ = sj_training._build_loaders(
            config, dp_size=dims.data_parallel_size, dp_rank=context.dp_rank
        )
        self.recipe = sj_training._recipe(config)
        self.shard = checkpoint.shard_name(context.pp_rank, context.tp_rank)
        self.root = plan.run_dir / CHECKPOINT_DIRNAME
        self.check_replicas = bool(plan.trainer.get("check_replicas")) and (
            dims.data_parallel == "ddp" and dims.data_parallel_size > 1
        )
        # Where each rank ran and what it holds: a user sees the placement, and a test can
        # tell a real FSDP2/TP/PP shard from a silent fallback to a whole model per rank.
        recorder.summary["ranks"] = ranks = context.gather(self._placement())
        recorder.summary["restarts"] = distributed_env.restarts(ranks)
        # early stopping and a search's pruner, after each epoch (run/early_stopping.py)
        self.monitor = Monitor.for_plan(plan, recorder.summary, agree=context.broadcast)

    def _placement(self) -> dict[str, Any]:
        from torch.distributed.tensor import DTensor

        parameters = list(self.model.parameters())
        sharded = [p for p in parameters if isinstance(p, DTensor)]
        context = self.context
        return {
            **distributed_env.placement(),
            "rank": context.rank,
            "coordinates": {"dp": context.dp_rank, "pp": context.pp_rank, "tp": context.tp_rank},
            # numel of a DTensor is its global size; to_local() is this rank's shard.
            "parameters_local": sum(
                p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in parameters
            ),
            "parameters_global": sum(p.numel() for p in parameters),
            "dtensor_parameters": len(sharded),
        }

    # --- one step -------------------------------------------------------------------------

    def _forward(self, images: torch.Tensor) -> torch.Tensor:
        model = self.config.model
        return _forward_classification(
            self.model, images, model.time_steps, model.step_mode, self.config.input_layout
        )

    def _step(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns the loss averaged over the data-parallel ranks."""
        context, dims = self.context, self.plan.dims
        self.optimizer.zero_grad(set_to_none=True)
        if self.train_schedule is None and self.plan.trainer.get("accumulation_steps", 1) > 1:
            loss = self._accumulate(images, targets)
        elif self.train_schedule is None:
            loss = _classification_loss(self._forward(images), targets, self.loss_function)
            loss.backward()
            loss = loss.detach()
        else:
            sequence = _classification_sequence(
                images, self.config.model.time_steps, self.config.input_layout, batch_first=True
            )
            losses: list[torch.Tensor] = []
            if context.pp_rank == 0:
                self.train_schedule.step(sequence)
            elif context.pp_rank == dims.pipeline_parallel_size - 1:
                self.train_schedule.step(target=targets, losses=losses)
            else:
                self.train_schedule.step()
            loss = distributed_env.collective_tensor(
                torch.stack(losses).mean().detach() if losses else 0.0
            )
            dist.broadcast(loss, src=context.last_stage_rank, group=context.pp_group)
            if dims.data_parallel == "ddp" and dims.data_parallel_size > 1:
                for parameter in self.model.parameters():  # DDP does not wrap pipeline stages
                    if parameter.grad is not None:
                        dist.all_reduce(parameter.grad, group=context.dp_group)
                        parameter.grad.div_(dims.data_parallel_size)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        if self.train_schedule is None:
            functional.reset_net(self.model)
        return context.all_reduce_dp(loss.clone()) / dims.data_parallel_size

    def _accumulate(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The rank's batch in trainer.accumulation_steps micro-batches (trainer.global_batch_size):
        each micro-batch's mean loss weighted by its share of the batch, so the summed
        gradients are those of the batch's mean loss (the network's state reset after each
        forward, as after a step). DDP synchronises once, on the last micro-batch."""
        from contextlib import nullcontext

        steps = self.plan.trainer["accumulation_steps"]
        batch_dim = self.config.input_layout.index("N") if "N" in self.config.input_layout else 0
        chunks = list(zip(images.chunk(steps, dim=batch_dim), targets.chunk(steps), strict=True))
        total = targets.numel()
        loss = torch.zeros(())
        for number, (micro_images, micro_targets) in enumerate(chunks):
            last = number == len(chunks) - 1
            no_sync = getattr(self.model, "no_sync", None)  # DDP's
            with nullcontext() if last or no_sync is None else no_sync():
                micro = _classification_loss(
                    self._forward(micro_images), micro_targets, self.loss_function
                )
                (micro * (micro_targets.numel() / total)).backward()
            functional.reset_net(self.model)
            loss = loss + micro.detach() * micro_targets.numel()
        return loss / total

    def _replica_spread(self) -> float:
        """Largest difference of any parameter sum across data-parallel replicas."""
        sums = torch.stack([p.detach().double().sum() for p in self.model.parameters()])
        gathered = [torch.empty_like(sums) for _ in range(self.plan.dims.data_parallel_size)]
        dist.all_gather(gathered, sums, group=self.context.dp_group)
        stacked = torch.stack(gathered)
        return (stacked.max(0).values - stacked.min(0).values).abs().max().item()

    def _evaluate(self) -> tuple[float, float]:
        context, dims = self.context, self.plan.dims
        if self.eval_schedule is None:
            return sj_training._evaluate(
                self.model,
                self.val_loader,
                device=DEVICE,
                precision=self.precision,
                loss_function=self.loss_function,
                dp_group=context.dp_group,
                dp_size=dims.data_parallel_size,
                sync_buffers=self.config.model.step_mode == "s"
                and dims.data_parallel == "ddp"
                and dims.data_parallel_size > 1,
                forward_step=self._forward,
            )
        self.model.eval()
        try:
            return sj_training._evaluate_pipeline(
                self.eval_schedule,
                self.val_loader,
                time_steps=self.config.model.time_steps,
                input_layout=self.config.input_layout,
                device=DEVICE,
                precision=self.precision,
                loss_function=self.loss_function,
                dp_group=context.dp_group,
                dp_size=dims.data_parallel_size,
                pp_group=context.pp_group,
                pp_rank=context.pp_rank,
                pp_size=dims.pipeline_parallel_size,
                tp_size=dims.tensor_parallel_size,
            )
        finally:
            self.model.train()

    # --- checkpoints ----------------------------------------------------------------------

    def _save(self, step: int, epoch: int, batch_in_epoch: int, best: bool = False) -> None:
        model_state, optimizer_state = get_state_dict(
            self.model, self.optimizer, options=FULL_STATE
        )
        state = {
            "model": model_state,
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else {},
            "rng": {"torch": torch.get_rng_state()},
        }
        meta = {
            "epoch": epoch,
            "batch_in_epoch": batch_in_epoch,
            "recipe": self.recipe,
            "mesh": self.plan.dims.as_dict(),
            "early_stopping": self.monitor.state(),
        }
        saved = checkpoint.save(
            self.root / BEST if best else self.root,  # best/: never pruned by the newest-N
            step,
            state,
            meta,
            shard=self.shard,
            is_writer=self.context.dp_rank == 0,
            is_leader=self.context.is_leader,
            barrier=self.context.barrier,
            keep=1 if best else self.plan.trainer["keep_checkpoints"],
        )
        if best:
            self.monitor.kept(saved)

    def _resume(self) -> tuple[int, int, int]:
        plan, context = self.plan, self.context
        if plan.resume is None:
            candidates = []
        elif plan.resume == "auto":  # rank 0's listing, so every rank tries the same steps
            candidates = context.broadcast(checkpoint.complete_checkpoints(self.root))
        else:
            candidates = [Path(plan.resume)]
        found = checkpoint.load_agreed(
            candidates, self.shard, self.recipe, context.all_true, loader=self._load
        )
        if found is None:
            self.recorder.truncate_logs(after_step=0)
            if plan.resume is None:  # starting over: older checkpoints must not outrank ours
                if context.is_leader:
                    shutil.rmtree(self.root, ignore_errors=True)
                context.barrier()
            return 0, 0, 0
        path, state, meta = found
        batch_in_epoch = self._resharded_position(path, meta)
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=FULL_STATE,
        )
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch"])
        self.monitor.restore(meta.get("early_stopping"))
        step = int(meta["step"])
        # Steps after the checkpoint are trained again: drop their records, keep one history.
        self.recorder.truncate_logs(after_step=step)
        self.recorder.summary["resumed_from"] = str(path)
        self.recorder.summary["resumes"] = self.recorder.summary.get("resumes", 0) + 1
        log.info("resumed from %s at step %d", path, step)
        return step, int(meta["epoch"]), batch_in_epoch

    def _load(self, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """This rank's state from a checkpoint: its own shard file, or, when the checkpoint
        was split into other pipeline stages / TP shards, re-split from all of them
        (engines/resplit.py). The data-parallel layout may differ either way (snn/reshard.py)."""
        meta = checkpoint.read_meta(path)
        dims, context = self.plan.dims, self.context
        written = tuple(meta.get("mesh", {}).get("shape", dims.mesh_shape))[1:]
        if tuple(written) == tuple(dims.mesh_shape[1:]):
            return checkpoint.load(path, self.shard, self.recipe, reshard.RECIPE_FIELDS)
        checkpoint.check_recipe(path, meta, self.recipe, reshard.RESPLIT_FIELDS)
        from experiments.snn.engines import resplit

        state = resplit.load(
            path,
            meta,
            self.config.model.get_builder_cls()(self.config.model),
            context.pp_rank,
            dims.pipeline_parallel_size,
            context.tp_rank,
            dims.tensor_parallel_size,
            get_state_dict(self.model, self.optimizer, options=FULL_STATE),
        )
        log.info("re-split %s from pp x tp = %s to %s", path, written, dims.mesh_shape[1:])
        return state, meta

    def _resharded_position(self, path: Path, meta: dict[str, Any]) -> int:
        """Where in its epoch a checkpoint written under another data-parallel layout
        resumes (snn/reshard.py: TP/PP as written, checked before launch). The per-rank batch
        index means the same samples while the global batch is kept; a global batch changed
        on purpose (trainer.allow_global_batch_change) resumes after the samples trained."""
        position = int(meta["batch_in_epoch"])
        if "mesh" not in meta:  # (written before meshes were recorded: as it was)
            return position
        old = reshard.global_batch(meta)
        new = self.config.batch_size * self.plan.dims.data_parallel_size
        if old == new:
            return position
        if not self.plan.trainer.get("allow_global_batch_change", False):
            raise checkpoint.CheckpointError(
                f"checkpoint {path} trained at a global batch of {old}, this run at {new}: "
                "keep it (trainer.global_batch_size), or trainer.allow_global_batch_change=true"
            )
        return position * old // new

    # --- the loop -------------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        config, dims, context, recorder = self.config, self.plan.dims, self.context, self.recorder
        step, epoch, batch_in_epoch = self._resume()
        steps_per_epoch = len(self.train_loader)
        epoch += batch_in_epoch // steps_per_epoch
        batch_in_epoch %= steps_per_epoch
        total_steps = config.epochs * steps_per_epoch
        if config.max_steps is not None:
            total_steps = min(total_steps, config.max_steps)
        log_every = self.plan.trainer["log_every_n_steps"]
        train_seconds = 0.0
        timed_images = 0
        last_loss = val_loss = val_accuracy = math.nan
        saved_step = step
        position = (epoch, batch_in_epoch)
        bar = tqdm(
            total=total_steps,
            initial=step,
            unit="step",
            disable=not context.is_leader,
            dynamic_ncols=True,
            mininterval=1.0 if sys.stderr.isatty() else 15.0,
        )
        self.model.train()
        profiler = StepProfiler(
            self.plan.trainer["profile_steps"], self.plan.run_dir, distributed_env.rank()
        ).start()
        while epoch < config.epochs and step < total_steps:
            self.train_sampler.set_epoch(epoch)
            bar.set_description(f"epoch {epoch + 1}/{config.epochs}")
            epoch_loss, epoch_steps = 0.0, 0
            epoch_images, epoch_seconds = timed_images, train_seconds
            # resumed mid-epoch: the sampler's order past what was trained, nothing loaded twice
            batches = batches_from(self.train_loader, batch_in_epoch)
            for index, (images, targets) in enumerate(batches, start=batch_in_epoch):
                started = time.perf_counter()
                loss = self._step(images, targets)
                train_seconds += time.perf_counter() - started
                timed_images += targets.numel() * dims.data_parallel_size
                step += 1
                profiler.step()
                last_loss = loss.item()
                # SpikingJelly's epoch mean weighs each step by its samples (a short last
                # batch counts less): epoch_steps counts samples, epoch_loss their sum.
                epoch_loss += last_loss * targets.numel()
                epoch_steps += targets.numel()
                bar.update(1)
                bar.set_postfix(
                    loss=f"{last_loss:.4f}",
                    img_s=f"{timed_images / train_seconds:.0f}",
                    refresh=False,
                )
                if step % log_every == 0 or step >= total_steps:  # the last step always
                    self._log_step(step, last_loss, timed_images / train_seconds)
                if config.checkpoint_interval and step % config.checkpoint_interval == 0:
                    self._save(step, epoch, index + 1)
                    saved_step = step
                if self.stop is not None and self.stop.requested(context.any_true):
                    if step != saved_step:
                        self._save(step, epoch, index + 1)
                    log.warning(
                        "stopping at step %d on signal %s; checkpoint saved",
                        step,
                        self.stop.received,
                    )
                    self.stop.hand_over()
                if step >= total_steps:
                    break
            # Where a resume would start: the next batch, or the next epoch if this one ended.
            position = (epoch, index + 1) if index + 1 < steps_per_epoch else (epoch + 1, 0)
            batch_in_epoch = 0
            epoch += 1
            val_loss, val_accuracy = self._evaluate()
            seconds = train_seconds - epoch_seconds
            memory = context.gather(peak_memory_mb())
            recorder.log_metrics(
                {
                    "step": step,
                    "epoch": epoch,
                    "train_loss": epoch_loss / max(epoch_steps, 1),
                    "val_loss": val_loss,
                    "val_accuracy": val_accuracy,
                    "images_per_second": (timed_images - epoch_images) / max(seconds, 1e-9),
                    "peak_memory_mb": max(memory),
                    "peak_memory_mb_per_rank": memory,
                    "lr": self.optimizer.param_groups[0]["lr"],
                }
            )
            if context.is_leader:  # tqdm.write prints even where the bar is disabled
                bar.write(f"epoch {epoch}: val_accuracy={val_accuracy:.4f} val_loss={val_loss:.4f}")
            if self.monitor.active:
                evaluated = {"val_accuracy": val_accuracy, "val_loss": val_loss,
                             "train_loss": epoch_loss / max(epoch_steps, 1)}  # fmt: skip
                verdict = self.monitor.after_evaluation(step, epoch, evaluated)
                if verdict.improved:
                    self._save(step, *position, best=True)
                if verdict.stop:
                    log.warning("early stopping at step %d (epoch %d)", step, epoch)
                    break
        bar.close()
        profiler.stop()
        if math.isnan(val_accuracy):  # resumed at the last step: nothing was evaluated yet
            val_loss, val_accuracy = self._evaluate()
        if step != saved_step:
            self._save(step, *position)
        return {
            "val_accuracy": val_accuracy,
            "val_loss": val_loss,
            "train_loss": last_loss,
            "images_per_second": timed_images / train_seconds if train_seconds else 0.0,
            "steps": step,
            "global_batch": config.batch_size * dims.data_parallel_size,
            "peak_memory_mb_per_rank": context.gather(peak_memory_mb()),
            **summary_metrics(context.gather(profiler.digest)),
        }

    def _log_step(self, step: int, loss: float, images_per_second: float) -> None:
        record = {
            "step": step,
            "loss": loss,
            "images_per_second": images_per_second,
            "time": time.time(),
        }
        if self.check_replicas:
            record["replica_max_diff"] = self._replica_spread()
        self.recorder.scalar("train/loss", loss, step)
        if self.recorder.enabled:
            append_jsonl(self.plan.run_dir / STEPS, record)
