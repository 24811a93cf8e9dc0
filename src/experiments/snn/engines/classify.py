"""`trainer=classify`: SpikingJelly's classic `train_classify.Trainer` as the second SNN engine.

A subclass using only the seams the Trainer offers (its argument parser, `load_ImageNet`,
`load_model`, `set_optimizer`, the `preprocess_*`/`process_model_output` hooks,
`train_one_epoch`/`evaluate`): data, model and optimizer come from our groups, the time
dimension is made in the sample hooks, and each evaluation is followed by the spike and
energy measurement on its slice (`spikingjelly_spikes.py`).

On CPU ranks its DDP path hard-codes CUDA (NCCL in `utils.init_distributed_mode`,
`device_ids=[args.gpu]`): both are swapped while `Trainer.main` runs in this process only
(`_distributed_init`, `_cpu_ranks`). Its checkpoints are written atomically (`_atomic_saves`)
so a full disk never cuts the previous one short.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

from experiments import collectives, garbage_collection
from experiments.run.early_stopping import Monitor, Verdict
from experiments.run.record import METRICS, atomically, read_jsonl
from experiments.snn.classify_plan import (
    CHECKPOINTS,
    LATEST,
    TB_NAME,
    checkpoint_dir,
    parse_arguments,
    resume_file,
)

if TYPE_CHECKING:
    import torch

# --------------------------------------------------------------------------- the engine


def train(plan: Any, recorder: Any) -> dict[str, Any]:
    from experiments import distributed_env

    # The Trainer's training step enters torch.cuda.amp.autocast (off without --amp) every
    # step; torch deprecates that spelling, which is the library's to change.
    warnings.filterwarnings(
        "ignore", message=r".*torch\.cuda\.amp\.autocast.*", category=FutureWarning
    )
    trainer = _trainer_class()(plan, recorder)
    args = parse_arguments(plan.trainer_args)
    found = None
    if plan.resume is not None:
        found = resume_file(plan.run_dir if plan.resume == "auto" else Path(plan.resume))
    if found is not None:
        args.resume = str(found)
        if recorder.enabled:
            recorder.summary["resumed_from"] = str(found)
            recorder.summary["resumes"] = recorder.summary.get("resumes", 0) + 1
    elif distributed_env.rank() == 0:
        # A fresh start: older checkpoints must not outrank this run's, and the Trainer
        # refuses an existing log directory without --resume.
        shutil.rmtree(plan.run_dir / CHECKPOINTS, ignore_errors=True)
    try:
        with _library_patches(args.device):
            try:
                trainer.main(args)
                trainer.after_checkpoint()  # the last epoch's: kept if it was the best
            except _EarlyStop:  # raised where the next epoch would start (run/early_stopping.py)
                pass
        metrics = trainer.final_metrics(args)
        if trainer.spikes is not None and recorder.enabled:
            trainer.spikes.draw(recorder)
        if args.distributed:
            metrics["replica_max_diff"] = trainer.replica_spread()
        return metrics
    finally:
        import torch.distributed as dist

        if trainer.spikes is not None:
            trainer.spikes.close()  # ended short: the figure child finishes on its own
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


@contextlib.contextmanager
def _library_patches(device: str) -> Iterator[None]:
    """While Trainer.main runs in this process: its checkpoints (which hold an
    argparse.Namespace) load with torch's weights-only loader, and on CPU ranks its DDP path
    runs on gloo."""
    import torch

    with (
        torch.serialization.safe_globals([argparse.Namespace]),
        _multistep_sync_bn(),
        _distributed_init(device),
        _atomic_saves(),
        _cpu_ranks() if device == "cpu" else contextlib.nullcontext(),
    ):
        yield


def _atomic_saves() -> contextlib.AbstractContextManager[Any]:
    """The Trainer's `utils.save_on_master` torch.saves in place: a full disk or quota mid-write
    leaves checkpoint_latest.pth cut short, and that is the file the next resume reads. Here
    the main process writes each one through `write_torch_atomic` (a temporary, fsync, rename;
    NoSpaceError naming the bytes it needed), so the previous complete checkpoint stays."""
    from spikingjelly.activation_based.examples.common.tv_ref_classify import utils

    from experiments.run.record import write_torch_atomic

    def save_on_master(state: Any, path: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        if utils.is_main_process():
            write_torch_atomic(state, Path(path))

    return mock.patch.object(utils, "save_on_master", save_on_master)


def _distributed_init(device: str) -> contextlib.AbstractContextManager[Any]:
    """The Trainer's `utils.init_distributed_mode` minus its Slurm guess: our launchers export
    RANK and WORLD_SIZE to every rank, and without them the library would take SLURM_PROCID
    (set in a `salloc` shell) for a rank of a distributed run and fail (NCCL without
    MASTER_ADDR on CUDA, a division by a CUDA device count of 0 on CPU)."""
    import torch.distributed as dist
    from spikingjelly.activation_based.examples.common.tv_ref_classify import utils

    original_init = utils.init_distributed_mode

    def init_distributed_mode(args: argparse.Namespace) -> None:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            args.distributed = False  # the library's "Not using distributed mode"
            return
        if device != "cpu":
            original_init(args)
            return
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = None
        args.distributed = True
        args.dist_backend = "gloo"
        dist.init_process_group(
            backend="gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank
        )

    return mock.patch.object(utils, "init_distributed_mode", init_distributed_mode)


def _multistep_sync_bn() -> contextlib.AbstractContextManager[Any]:
    """--sync-bn: torch's convert_sync_batchnorm replaces SpikingJelly's multi-step
    BatchNorm (which folds [T, N, C, H, W] into [T*N, C, H, W]) by a plain SyncBatchNorm that
    would read T as the batch and N as the channels. The converted layers of a multi-step
    model keep SpikingJelly's folding (same parameters, buffers and state-dict keys)."""
    import torch

    sync_bn = torch.nn.SyncBatchNorm
    original = sync_bn.__dict__["convert_sync_batchnorm"]  # the classmethod itself
    convert = original.__get__(None, sync_bn)

    def convert_multistep(cls: type, module: Any, process_group: Any = None) -> Any:
        steps = {name: getattr(m, "step_mode", "s") for name, m in module.named_modules()}
        converted = convert(module, process_group)  # recurses through this function
        for name, layer in converted.named_modules():
            if type(layer) is sync_bn and steps.get(name) == "m":
                layer.__class__ = _multistep_sync_bn_class()
        return converted

    return mock.patch.object(sync_bn, "convert_sync_batchnorm", classmethod(convert_multistep))


@functools.cache
def _multistep_sync_bn_class() -> type:
    import torch
    from spikingjelly.activation_based import functional

    class MultiStepSyncBatchNorm(torch.nn.SyncBatchNorm):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.dim() == 5:  # [T, N, C, H, W]
                return functional.seq_to_ann_forward(x, super().forward)
            return super().forward(x)

    return MultiStepSyncBatchNorm


def _cpu_ranks() -> contextlib.AbstractContextManager[Any]:
    import torch

    from experiments.snn.engines.spikingjelly_cpu import CPUDistributedDataParallel

    return mock.patch.object(
        torch.nn.parallel, "DistributedDataParallel", CPUDistributedDataParallel
    )


@functools.cache
def _trainer_class() -> type:
    """The subclass, defined on first use: importing the Trainer pulls in torchvision and
    TensorBoard, which planning other engines must not pay for. Its methods are
    `_ClassifyHooks`'s, which imports nothing of the library until a method runs."""
    from spikingjelly.activation_based.examples.common import train_classify

    class ClassifyTrainer(_ClassifyHooks, train_classify.Trainer):
        """The hooks SpikingJelly's Trainer is meant to be subclassed through."""

    return ClassifyTrainer


class _ClassifyHooks:
    """The methods ClassifyTrainer overrides, first in its MRO: `super()` here is
    SpikingJelly's Trainer."""

    def __init__(self, plan: Any, recorder: Any) -> None:
        self.plan = plan
        self.recorder = recorder
        self.config = plan.training_config
        self.time_steps = self.config.model.time_steps
        self.history: list[dict[str, Any]] = []
        self._epoch: dict[str, Any] = {}
        self._truncated = False
        self._dead: str | None = None  # the spike health guard's verdict on the last evaluation
        # early stopping and a search's pruner after each epoch (run/early_stopping.py)
        self.monitor = Monitor.for_plan(
            plan, recorder.summary, agree=collectives.broadcast_from_rank0
        )
        self._verdict = Verdict(improved=False, stop=False)
        self.spikes = None
        if plan.spikes is not None and plan.spikes.active:
            from experiments.snn.engines.spikingjelly_spikes import LoopSpikes

            self.spikes = LoopSpikes(plan.spikes, plan, records=[])

    # --- data and model: our groups -----------------------------------------------------

    def load_ImageNet(self, args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
        """Our data group's datasets; the Trainer's own samplers, seeded like it seeds
        them (one process gets a one-replica DistributedSampler, whose order depends on
        seed and epoch only, so a resumed epoch sees the batches it would have)."""
        import torch
        from torch.utils.data import DistributedSampler

        from experiments.data import import_object

        train_set, val_set = import_object(self.config.dataset_builder, "data.builder")(
            **self.config.dataset_kwargs
        )
        for dataset in (train_set, val_set):  # Trainer.main counts len(dataset.classes)
            if not hasattr(dataset, "classes"):
                dataset.classes = list(range(self.config.model.num_classes))
        if args.distributed:
            train_sampler = DistributedSampler(train_set, seed=args.seed)
            val_sampler = DistributedSampler(val_set, shuffle=False)
        else:
            train_sampler = DistributedSampler(train_set, num_replicas=1, rank=0, seed=args.seed)
            val_sampler = torch.utils.data.SequentialSampler(val_set)
        return train_set, val_set, train_sampler, val_sampler

    def load_model(self, args: argparse.Namespace, num_classes: int) -> torch.nn.Module:
        """The ModelConfig's builder as SpikingJelly's loop calls it (whole model, a stage)."""
        import torch

        from experiments.snn.models import build_single_process_model

        model = build_single_process_model(
            self.config.model, torch.device(args.device), args.batch_size
        )
        self.model = model  # the replicas' parameters (DDP wraps, never copies, it)
        return model

    def set_optimizer(self, args: argparse.Namespace, parameters: Any) -> torch.optim.Optimizer:
        """Our optimizer group's class and arguments (the Trainer knows three by name);
        the Trainer's norm-weight-decay parameter groups keep their own weight_decay."""
        from experiments.data import import_object

        cls = import_object(self.config.optimizer, "optimizer.name")
        return cls(parameters, **self.config.optimizer_kwargs)

    def replica_spread(self) -> float:
        """Largest difference of any parameter's sum across the DDP replicas (0: in step)."""
        return collectives.replica_spread(self.model.parameters())

    def get_tb_logdir_name(self, args: argparse.Namespace) -> str:
        return TB_NAME

    # --- the time dimension ------------------------------------------------------------

    def preprocess_train_sample(self, args: argparse.Namespace, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 5:  # [N, T, C, H, W] from a sequence loader -> [T, N, C, H, W]
            return x.transpose(0, 1).contiguous()
        return x.unsqueeze(0).repeat(self.time_steps, *([1] * x.ndim))

    preprocess_test_sample = preprocess_train_sample

    def process_model_output(self, args: argparse.Namespace, y: torch.Tensor) -> torch.Tensor:
        return y.mean(0) if y.ndim == 3 else y  # [T, N, classes] -> firing-rate readout

    # --- recording ---------------------------------------------------------------------

    def train_one_epoch(
        self,
        model: torch.nn.Module,
        criterion: Any,
        optimizer: torch.optim.Optimizer,
        data_loader: Any,
        device: Any,
        epoch: int,
        args: argparse.Namespace,
        model_ema: Any = None,
        scaler: Any = None,
    ) -> tuple[float, float, float]:
        """The library's epoch; records its throughput and where a resume starts."""
        import torch
        from spikingjelly.activation_based.examples.common.tv_ref_classify import utils

        garbage_collection.end_start_up()  # start-up is over (garbage_collection.py)
        self.after_checkpoint()  # the Trainer saved the previous epoch's checkpoint
        steps_per_epoch = len(data_loader)
        args.steps_per_epoch = steps_per_epoch  # saved with the checkpoint's args
        if not self._truncated:  # epochs after the checkpoint are trained again
            self.recorder.truncate_logs(after_step=epoch * steps_per_epoch)
            self.history = [r for r in _read_metrics(self.plan.run_dir) if r["epoch"] <= epoch]
            if self.spikes is not None and self.recorder.enabled:
                from experiments.snn.engines.spikingjelly_spikes import records_up_to

                self.spikes.resume(records_up_to(self.plan.run_dir, epoch * steps_per_epoch))
            self._truncated = True
        if not args.distributed:
            data_loader.sampler.set_epoch(epoch)
        lr = optimizer.param_groups[0]["lr"]
        started = time.perf_counter()
        train_loss, train_acc1, _ = super().train_one_epoch(  # type: ignore[misc]
            model, criterion, optimizer, data_loader, device, epoch, args, model_ema, scaler
        )
        seconds, images = time.perf_counter() - started, len(data_loader.sampler)
        if args.distributed:  # all ranks' images over the slowest rank's time
            maximum = torch.distributed.ReduceOp.MAX
            seconds = utils.reduce_across_processes(seconds, op=maximum).item()
            images = utils.reduce_across_processes(images).item()
        self._epoch = {
            "step": (epoch + 1) * steps_per_epoch,
            "epoch": epoch + 1,
            "train_loss": float(train_loss),
            "train_accuracy": float(train_acc1) / 100,
            "images_per_second": images / max(seconds, 1e-9),
            "lr": lr,
            "train_seconds": seconds,
        }
        return train_loss, train_acc1, _

    def evaluate(
        self,
        args: argparse.Namespace,
        model: torch.nn.Module,
        criterion: Any,
        data_loader: Any,
        device: Any,
        log_suffix: str = "",
    ) -> tuple[float, float, float]:
        loss, acc1, acc5 = super().evaluate(  # type: ignore[misc]
            args, model, criterion, data_loader, device, log_suffix
        )
        key = "ema_val" if log_suffix == "EMA" else "val"
        self._epoch.update({f"{key}_loss": float(loss), f"{key}_accuracy": float(acc1) / 100})
        if self.spikes is not None and key == "val" and not args.test_only:
            self._measure_spikes(args, model, data_loader)
        if not args.test_only and (log_suffix == "EMA" or not args.model_ema):
            self._log_epoch()
        return loss, acc1, acc5

    def _measure_spikes(self, args: argparse.Namespace, model: Any, data_loader: Any) -> None:
        """The slice through the Trainer's own evaluation forward (its preprocessing, the
        model, its readout); every rank measures its share, rank 0 records."""
        import types

        import torch

        ddp = torch.nn.parallel.DistributedDataParallel
        tree = model.module if isinstance(model, ddp) else model  # no collective per forward

        def forward(images: torch.Tensor) -> torch.Tensor:
            images = images.to(args.device, non_blocking=True)
            return self.process_model_output(args, tree(self.preprocess_test_sample(args, images)))

        scope = {
            "model": tree,
            "evaluation_step": forward,
            "validation_loader": data_loader,
            "config": types.SimpleNamespace(batch_size=args.batch_size, model=self.config.model),
            "dp_group": None,
        }
        measured, self._dead = self.spikes.after_evaluation(
            scope, self._epoch["step"], self._epoch["epoch"]
        )
        if measured is not None:
            from experiments.snn.spikes import METRICS

            self._epoch.update({key: measured[key] for key in METRICS})
            self.spikes.log(self.recorder, measured, self._epoch["step"])

    def after_checkpoint(self) -> None:
        """After the Trainer saved an epoch's checkpoint: keep it as the best if that
        epoch was, and stop here if early stopping said so."""
        verdict, self._verdict = self._verdict, Verdict(improved=False, stop=False)
        if verdict.improved:
            folder = checkpoint_dir(self.plan.run_dir)
            if self.recorder.enabled:
                with atomically(folder / BEST_FILE, fsync=False) as temporary:
                    shutil.copyfile(folder / LATEST, temporary)
            self.monitor.kept(folder / BEST_FILE)
        if verdict.stop:
            raise _EarlyStop

    def _log_epoch(self) -> None:
        record = dict(self._epoch)
        self.history.append(record)
        self.recorder.log_metrics(record)
        if self.monitor.active:
            self._verdict = self.monitor.after_evaluation(record["step"], record["epoch"], record)
        if self.recorder.enabled:
            rate = f" firing_rate={record['firing_rate']:.4f}" if "firing_rate" in record else ""
            print(
                f"epoch {record['epoch']}: val_accuracy={record['val_accuracy']:.4f} "
                f"val_loss={record['val_loss']:.4f} train_loss={record['train_loss']:.4f}{rate}",
                flush=True,
            )
        if self._dead is not None:  # the spike health guard's verdict, the same on every rank
            from experiments.snn.spikes import DeadLayer

            raise DeadLayer(self._dead)

    def final_metrics(self, args: argparse.Namespace) -> dict[str, Any]:
        if not self._truncated:  # resumed after its last epoch: the record has them all
            self.history = _read_metrics(self.plan.run_dir)
        last = self.history[-1] if self.history else {}
        evaluated = self._epoch if args.test_only else last
        metrics = {
            "val_accuracy": evaluated.get(
                "val_accuracy", evaluated.get("ema_val_accuracy", math.nan)
            ),
            "val_loss": evaluated.get("val_loss", evaluated.get("ema_val_loss", math.nan)),
            "train_loss": last.get("train_loss", math.nan) if not args.test_only else math.nan,
            "images_per_second": _mean_throughput(self.history) if not args.test_only else 0.0,
            "steps": last.get("step", 0),
            "epochs": last.get("epoch", 0),
            "global_batch": args.batch_size * getattr(args, "world_size", 1),
        }
        from experiments.snn.spikes import METRICS

        for key in ("ema_val_accuracy", "ema_val_loss", *METRICS):
            if key in evaluated:
                metrics[key] = evaluated[key]
        return metrics


BEST_FILE = "checkpoint_best.pth"  # early stopping's best epoch, beside the Trainer's own


class _EarlyStop(Exception):
    """Early stopping ends Trainer.main where its next epoch would start."""


def _mean_throughput(history: list[dict[str, Any]]) -> float:
    seconds = sum(r.get("train_seconds", 0.0) for r in history)
    if not seconds:
        return 0.0
    return sum(r["images_per_second"] * r.get("train_seconds", 0.0) for r in history) / seconds


def _read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / METRICS)[0]
