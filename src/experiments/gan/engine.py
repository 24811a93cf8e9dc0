"""GAN engine: MMGen's train_model and DynamicIterBasedRunner, recorded like every run.

Training is MMGen's (recipe, runner, its hooks); ours add the record (here), resume, atomic
checkpoints and stops (hooks.py, mmgen_compat), then SWD and MS-SSIM score the run. Quality and
checkpoint locations are modules of their own (quality.py, checkpoints.py) because evaluate.py
and sample.py share them. On CPU ranks (gloo) train_model(distributed=True) cannot run: it moves
the model to CUDA and seeds its sampler through a CUDA tensor, so `_train_cpu_ddp` repeats its
few lines with CPU-capable parts (ddp.py); nothing in mmgen or mmcv is edited.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from experiments import collectives, distributed_env, garbage_collection
from experiments.data.image_files import DIGITS_FOLDER, ensure_digits_pngs
from experiments.gan import conditional, mmgen_compat
from experiments.gan import ddp as gan_ddp
from experiments.gan import hooks as gan_hooks
from experiments.gan.checkpoints import latest_checkpoint
from experiments.gan.quality import quality
from experiments.gan.recipes import SAMPLES_DIRNAME
from experiments.run import early_stopping
from experiments.run.record import METRICS, RunRecorder, atomically, read_jsonl
from experiments.run.stop import GracefulStop

log = logging.getLogger("experiments.gan")
CONFIG_FILE = "mmgen_config.py"  # the composed recipe, as MMGen's tools/train.py dumps it
FINAL_GRID = "final.png"
UNTRAINED_KEYS = ("swd", "swd_per_level", "ms_ssim")  # recorded as <key>_untrained


def start_point(plan: Any) -> tuple[str, Path | None]:
    """(how, checkpoint): the run's own newest checkpoint wins (re-running a run resumes it),
    then resume_from (whole state), then load_from (weights only), else a fresh start."""
    if plan.resume == "auto":
        own = latest_checkpoint(plan.run_dir)
        if own is not None:
            return "auto_resume", own
    if plan.resume_from:
        return "resume_from", Path(plan.resume_from)
    if plan.load_from:
        return "load_from", Path(plan.load_from)
    return "fresh", None


def _register_record_hook() -> None:
    from mmcv.runner import HOOKS

    if "ExperimentsRecordHook" in HOOKS.module_dict:
        return
    _register_logger_hooks(HOOKS)
    HOOKS.register_module(module=_record_hook_class())


def _guarded(base: type) -> type:
    """mmcv's logger hook, except that a logger error is logged once and the hook
    stops: a logger never ends a training run half-way."""

    def guard(method: str) -> Any:
        def guarded(self: Any, runner: Any) -> None:
            if self.failed:
                return
            try:
                getattr(base, method)(self, runner)
            except Exception as error:
                self.failed = True
                log.warning(
                    "%s failed in %s (%s); training goes on without it",
                    base.__name__,
                    method,
                    error,
                )

        return guarded

    methods = {method: guard(method) for method in ("before_run", "log", "after_run")}
    return type(f"Experiments{base.__name__}", (base,), dict(methods, failed=False))


def _register_logger_hooks(hooks: Any) -> None:
    """mmcv's TensorBoard, MLflow and W&B logger hooks, guarded (`_guarded`), for the
    logger group's loggers (loggers/: each one's `mmcv_hook`)."""
    from mmcv.runner.hooks.logger import MlflowLoggerHook, TensorboardLoggerHook, WandbLoggerHook

    hooks.register_module(module=_guarded(TensorboardLoggerHook))
    hooks.register_module(module=_guarded(MlflowLoggerHook))

    @hooks.register_module()
    class ExperimentsWandbLoggerHook(_guarded(WandbLoggerHook)):  # type: ignore[misc]
        """The run stays open after training: the run's final metrics and sample grids come
        after train_model returns, and the W&B logger (loggers/wandb.py) logs them and
        finishes the run."""

        def after_run(self, runner: Any) -> None:
            return None


def _record_hook_class() -> type:
    from mmcv.runner import Hook

    class ExperimentsRecordHook(Hook):
        """Losses to metrics.jsonl (and the loggers mmcv has no hook for: CSV) every log
        interval and at the last iteration; resumed runs keep one record per iteration."""

        def __init__(
            self, recorder: RunRecorder, interval: int, images_per_iter: int, cpu: bool = False
        ) -> None:
            self.recorder = recorder
            self.interval = interval
            self.images_per_iter = images_per_iter
            self.say_cpu = cpu  # said once, at the first record (see cpu_notice)
            self.last: dict[str, Any] = {}
            self.start_iter = 0
            self.started = time.perf_counter()

        def before_run(self, runner: Any) -> None:
            garbage_collection.end_start_up()  # start-up is over (garbage_collection.py)
            self.start_iter = runner.iter
            self.recorder.truncate_logs(after_step=runner.iter)
            self.started = time.perf_counter()

        def after_train_iter(self, runner: Any) -> None:
            values = gan_hooks.logged(runner, self.interval)
            if values is None:
                return
            done = runner.iter + 1
            record: dict[str, Any] = {"step": done, **values}
            elapsed = time.perf_counter() - self.started
            record["images_per_second"] = (
                (done - self.start_iter) * self.images_per_iter / elapsed if elapsed else 0.0
            )
            record["time"] = time.time()
            self.last = record
            self.recorder.log_metrics(record, tag_prefix="train")
            if self.say_cpu and done > self.start_iter:
                self.say_cpu = False
                print(
                    cpu_notice(elapsed / (done - self.start_iter), done - self.start_iter),
                    flush=True,
                )

    return ExperimentsRecordHook


def cpu_notice(seconds_per_iter: float, iters: int) -> str:
    """One line a CPU run prints at its first log interval: MMGen's guide says CPU training
    is "too slow" and meant "to debug on machines without GPU"; the measured speed shows it."""
    return (
        f"note: this GAN trains on the CPU at {seconds_per_iter:.3f} s/iter (measured over "
        f"{iters} iterations): CPU training is for debugging a recipe, as MMGen's guide says; "
        "train real runs on GPUs"
    )


def train(plan: Any, recorder: RunRecorder) -> dict[str, Any]:
    mmgen_compat.import_mmgen()
    _register_record_hook()
    gan_hooks.register()
    # Before any DDP is built, on every device: train_model's CUDA wrappers need it as much
    # as our CPU ones (ddp.py).
    gan_ddp.install_replicated_tensor_fix()
    from mmgen.apis import set_random_seed, train_model
    from mmgen.datasets import build_dataset
    from mmgen.utils import get_root_logger

    from experiments.gan.recipes import build_model

    distributed = plan.distributed  # also one rank under torchrun/Slurm with topology=ddp
    placements = _join_ranks(plan)
    rank = distributed_env.rank()
    cfg = copy.deepcopy(plan.mmgen_config)
    how, checkpoint = start_point(plan)
    if rank == 0:
        _record_start(recorder, plan, cfg, (how, checkpoint), placements)
    hook_recorder = recorder if rank == 0 else RunRecorder(plan.run_dir, {}, enabled=False)
    stop = GracefulStop().install()
    _add_hooks(cfg, plan, hook_recorder, (how, checkpoint), stop)
    timestamp = time.strftime("%Y%m%d_%H%M%S")
    log_file = str(plan.run_dir / f"{timestamp}.log") if rank == 0 else None
    get_root_logger(log_file=log_file, log_level=cfg.log_level)
    set_random_seed(cfg.seed, use_rank_shift=distributed)
    model = build_model(cfg)
    dataset = build_dataset(cfg.data.train)
    _add_early_stopping(cfg, plan, recorder, model, dataset)
    untrained: dict[str, Any] = {}
    if plan.recipe.eval_untrained and rank == 0:
        # The generator as built from the seed, before any checkpoint is loaded: iteration 0
        # of this run (a resumed run rebuilds the same one), measured as at the end.
        measured = _measured_while_training(model, dataset, plan)
        untrained = {f"{k}_untrained": measured[k] for k in UNTRAINED_KEYS if k in measured}
    meta = dict(seed=cfg.seed, exp_name=plan.run_dir.resolve().name)
    started = time.perf_counter()
    try:
        if distributed and plan.device == "cpu":
            _train_cpu_ddp(model, dataset, cfg, timestamp, meta)
        else:
            train_model(
                model,
                dataset,
                cfg,
                distributed=distributed,
                validate=False,
                timestamp=timestamp,
                meta=meta,
            )
    finally:
        stop.restore()
    wall = time.perf_counter() - started
    gan_ddp.unwrap(model)  # model.ddp=static wrapped its parts in place

    replica_diff = _replica_max_diff(model) if distributed else None
    metrics: dict[str, Any] = {}
    if rank == 0:
        records = read_jsonl(hook_recorder.run_dir / METRICS)[0]  # train_model keeps its runner
        last = records[-1] if records else {}  # the record hook's last record
        metrics = {
            "iters": plan.recipe.iters,
            "steps": last.get("step", plan.recipe.iters),  # fewer when stopped early
            "loss_gen": last.get("loss_gen"),
            "loss_disc": last.get("loss_disc"),
            "images_per_second": last.get("images_per_second"),
            "train_seconds": round(wall, 2),
        }
        if replica_diff is not None:
            metrics["replica_max_diff"] = replica_diff
        model.eval()
        grid = save_final_grid(model, plan)
        metrics.update(quality(model, dataset, plan))
        metrics.update(untrained)
        metrics["final_grid"] = str(grid.relative_to(plan.run_dir))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return metrics


def _join_ranks(plan: Any) -> list[dict[str, Any]]:
    """This rank in the run's process group (made here where the launcher did not), the
    digits images on disk, and where every rank runs (summary.json's `ranks`), gathered from
    all ranks: also their first barrier."""
    distributed = plan.distributed
    if distributed and not dist.is_initialized():
        if plan.device == "cuda":
            torch.cuda.set_device(distributed_env.local_rank())
        distributed_env.init_process_group(plan.backend)
    if plan.image_root.name == DIGITS_FOLDER:
        ensure_digits_pngs(plan.image_root)  # atomic: ranks may race
    placements: list[Any] = [distributed_env.placement()]
    if distributed:
        placements = [None] * plan.dims.world_size
        dist.all_gather_object(placements, distributed_env.placement())  # also the barrier
    return placements


def _record_start(
    recorder: RunRecorder, plan: Any, cfg: Any, start: tuple[str, Path | None], placements: list
) -> None:
    """Rank 0's record of how the run starts, beside the composed recipe it trains."""
    how, checkpoint = start
    recipe = plan.run_dir / CONFIG_FILE  # (mmcv's dump reads the format from the suffix)
    with atomically(recipe, recipe.with_name(f".{recipe.stem}.tmp{recipe.suffix}")) as temporary:
        cfg.dump(str(temporary))
    recorder.summary.update(start=how, start_checkpoint=str(checkpoint) if checkpoint else None)
    recorder.summary["ranks"] = placements  # where each rank ran
    recorder.summary["restarts"] = distributed_env.restarts(placements)
    recorder.summary["ddp"] = gan_ddp.configured(cfg) if plan.distributed else None
    if how == "auto_resume":
        recorder.summary["resumes"] = recorder.summary.get("resumes", 0) + 1


def _add_hooks(
    cfg: Any, plan: Any, hook_recorder: RunRecorder, start: tuple[str, Path | None], stop: Any
) -> None:
    """Our hooks, in the recipe MMGen's runner builds its hooks from."""
    how, checkpoint = start
    distributed = plan.distributed
    record_hook = dict(
        type="ExperimentsRecordHook",
        recorder=hook_recorder,
        interval=plan.recipe.log_interval,
        images_per_iter=plan.global_batch,
        cpu=plan.device == "cpu" and distributed_env.rank() == 0,
        priority="VERY_LOW",
    )
    cfg.custom_hooks = [*cfg.custom_hooks, record_hook]
    # The logger group's loggers log per-iteration metrics through mmcv's own logger hooks.
    logger_hooks = [t.mmcv_hook(plan.recipe.log_interval) for t in hook_recorder.loggers]
    cfg.log_config.hooks = [*cfg.log_config.hooks, *(h for h in logger_hooks if h)]
    if how in ("auto_resume", "resume_from"):
        cfg.custom_hooks.append(
            dict(type="CPUResumeHook", checkpoint=str(checkpoint), priority="HIGHEST")
        )
    elif how == "load_from":
        cfg.load_from = str(checkpoint)  # BaseRunner.load_checkpoint maps to the CPU itself
    # Atomic checkpoint writes, and a checkpoint of the current iteration on SIGTERM/SIGUSR2
    # (gan/hooks.py); the dumped recipe above keeps MMGen's own CheckpointHook.
    cfg.checkpoint_config = dict(cfg.checkpoint_config, type=gan_hooks.CHECKPOINT_HOOK)
    cfg.custom_hooks.append(
        dict(type=gan_hooks.STOP_HOOK, stop=stop, distributed=distributed, priority="LOWEST")
    )


def _add_early_stopping(
    cfg: Any, plan: Any, recorder: RunRecorder, model: Any, dataset: Any
) -> None:
    """Early stopping, and a pruned search's reports (its mmcv hook: gan/hooks.py). A trial of
    a search with a pruner measures its objective (swd) at every log interval on rank 0."""
    rank = distributed_env.rank()
    monitor = early_stopping.Monitor.for_plan(
        plan, recorder.summary, agree=collectives.broadcast_from_rank0
    )
    if monitor.active:
        measure = None
        if monitor.reporter is not None and rank == 0:
            measure = partial(_measured_while_training, model, dataset, plan)
        cfg.custom_hooks.append(
            gan_hooks.early_stopping_hook(monitor, plan.recipe.log_interval, measure=measure)
        )


def _measured_while_training(model: Any, dataset: Any, plan: Any) -> dict[str, Any]:
    """SWD and MS-SSIM of the generator as it is now (the end's own measurement, seeded: every
    interval is measured on the same images and noise), back in training mode after."""
    model.eval()
    try:
        return quality(model, dataset, plan)
    finally:
        model.train()


def _replica_max_diff(model: Any) -> float:
    """Largest difference between any rank's parameters and rank 0's: 0 when MMGen's
    dynamic-DDP reducer kept the replicas in step."""
    flat = torch.cat([p.detach().flatten().float() for p in model.parameters()])
    flat = distributed_env.collective_tensor(flat)  # the backend's device (NCCL: CUDA)
    reference = flat.clone()
    dist.broadcast(reference, 0)
    diff = (flat - reference).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return float(diff)


def _train_cpu_ddp(model: Any, dataset: Any, cfg: Any, timestamp: str, meta: dict) -> None:
    """train_model(distributed=True) for gloo ranks: the same runner, hooks and order."""
    from mmcv.parallel import MMDistributedDataParallel, collate
    from mmcv.runner import HOOKS, build_runner
    from mmcv.utils import build_from_cfg
    from mmgen.core.optimizer import build_optimizers
    from mmgen.utils import get_root_logger
    from torch.utils.data import DataLoader, DistributedSampler

    batch = cfg.data.samples_per_gpu
    sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed)
    loader = DataLoader(
        dataset,
        batch_size=batch,
        sampler=sampler,
        num_workers=cfg.data.workers_per_gpu,
        drop_last=True,
        collate_fn=partial(collate, samples_per_gpu=batch),
    )
    optimizer = build_optimizers(model, cfg.optimizer)
    if cfg.get("use_ddp_wrapper", False):  # model.ddp=static: MMGen's wrapper, on the CPU
        ddp = gan_ddp.cpu_wrapper(model)
    else:  # model.ddp=dynamic: the whole model under one DDP, the runner passes its reducer
        ddp = MMDistributedDataParallel(
            model,
            broadcast_buffers=False,
            find_unused_parameters=cfg.get("find_unused_parameters", False),
        )  # its forward (the sample hook's) needs gan_ddp.install_replicated_tensor_fix
    runner_cfg = dict(cfg.runner)
    runner = build_runner(
        runner_cfg,
        dict(
            model=ddp,
            optimizer=optimizer,
            work_dir=cfg.work_dir,
            logger=get_root_logger(cfg.log_level),
            use_apex_amp=False,
            meta=meta,
        ),
    )
    runner.timestamp = timestamp
    checkpoint_config = dict(cfg.checkpoint_config)
    checkpoint_config["out_dir"] = os.path.join(
        cfg.work_dir, checkpoint_config.get("out_dir", "ckpt")
    )
    runner.register_training_hooks(
        cfg.lr_config, None, checkpoint_config, cfg.log_config, cfg.get("momentum_config", None)
    )
    for hook_cfg in cfg.custom_hooks:
        hook_cfg = dict(hook_cfg)
        priority = hook_cfg.pop("priority", "NORMAL")
        runner.register_hook(build_from_cfg(hook_cfg, HOOKS), priority=priority)
    if cfg.load_from:
        runner.load_checkpoint(cfg.load_from)
    runner.run([loader], cfg.workflow, cfg.total_iters)


@torch.no_grad()
def save_final_grid(model: Any, plan: Any) -> Path:
    """The trained generator's samples, as MMGen's sample hook draws them (same layout)."""
    from torchvision.utils import save_image

    torch.manual_seed(plan.seed)
    # The EMA generator where the recipe trains one; one row per class for a conditional one.
    kwargs, per_row = conditional.grid_kwargs(model, plan.recipe.num_samples)
    images = model(None, num_batches=plan.recipe.num_samples, return_loss=False, **kwargs)
    images = ((images + 1) / 2).clamp(0, 1)
    if images.shape[1] == 3:
        images = images[:, [2, 1, 0]]  # MMGen trains on BGR (mmcv's image order)
    path = plan.run_dir / SAMPLES_DIRNAME / FINAL_GRID
    path.parent.mkdir(parents=True, exist_ok=True)
    save_image(images, str(path), nrow=per_row or math.ceil(math.sqrt(len(images))), padding=0)
    return path
