"""mmcv hooks of ours for GAN runs, registered in mmcv's HOOKS (nothing in mmcv is edited).

MMGen's save_checkpoint pickles straight into `iter_N.pth`, so a crash mid-write (OOM kill,
SIGKILL at a time limit) left a truncated file under the name a resume looks for:
ExperimentsCheckpointHook has it written through the one atomic writer (run/record.py
`atomically`: a hidden name in the same folder, synced and renamed when whole).
ExperimentsStopHook checkpoints the current iteration on Slurm's SIGTERM or submitit's SIGUSR2,
so the requeued or re-run job resumes there instead of at the last periodic checkpoint.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.run.early_stopping import Monitor
from experiments.run.record import atomically
from experiments.run.stop import GracefulStop

log = logging.getLogger("experiments.gan")
CHECKPOINT_HOOK = "ExperimentsCheckpointHook"
STOP_HOOK = "ExperimentsStopHook"
PARTIAL_SUFFIX = ".partial"  # hidden `.iter_N.pth.partial` while MMGen writes it


def partial_name(filename: str) -> str:
    return f".{filename}{PARTIAL_SUFFIX}"


def register() -> None:
    """Idempotent; call after mmgen is imported (engine.train does)."""
    from mmcv.runner import HOOKS

    if CHECKPOINT_HOOK not in HOOKS.module_dict:
        HOOKS.register_module(name=CHECKPOINT_HOOK, module=_checkpoint_hook())
    if STOP_HOOK not in HOOKS.module_dict:
        HOOKS.register_module(name=STOP_HOOK, module=_stop_hook())


def _checkpoint_hook() -> type:
    import mmcv
    from mmcv.runner import CheckpointHook
    from mmcv.runner.dist_utils import master_only

    class ExperimentsCheckpointHook(CheckpointHook):
        """mmcv's CheckpointHook with atomic writes (see the module docstring). `saved_iter`
        is the last iteration it saved (the stop hook does not save it twice)."""

        saved_iter = 0

        def before_run(self, runner: Any) -> None:
            super().before_run(runner)
            if runner.rank == 0:  # the writer; a write cut short by an earlier crash goes
                for stale in Path(self.out_dir).glob(partial_name("*")):
                    stale.unlink(missing_ok=True)

        def after_train_iter(self, runner: Any) -> None:
            super().after_train_iter(runner)
            if self.every_n_iters(runner, self.interval) or (
                self.save_last and self.is_last_iter(runner)
            ):
                self.saved_iter = runner.iter + 1

        def save_now(self, runner: Any) -> None:
            """A checkpoint of the current iteration, outside the interval (rank 0 writes)."""
            self._save_checkpoint(runner)
            self.saved_iter = runner.iter + 1

        @master_only
        def _save_checkpoint(self, runner: Any) -> None:
            # mmcv's method (the save, hook_msgs, max_keep_ckpts), with the runner's
            # save_checkpoint made atomic for the duration of the call.
            runner.save_checkpoint = _atomic(runner.save_checkpoint, runner)
            try:
                super()._save_checkpoint(runner)
            finally:
                del runner.save_checkpoint  # the class's method again

    def _atomic(save: Any, runner: Any) -> Any:
        def save_checkpoint(
            out_dir: str,
            filename_tmpl: str = "iter_{}.pth",
            create_symlink: bool = True,
            **kwargs: Any,
        ) -> None:
            filename = filename_tmpl.format(runner.iter + 1)
            hidden = partial_name(filename)
            # MMGen formats the template with the iteration: braces of the name are literal.
            literal = hidden.replace("{", "{{").replace("}", "}}")
            temporary, final = Path(out_dir) / hidden, Path(out_dir) / filename
            # The one atomic writer (run/record.py): MMGen writes the temporary by name.
            with atomically(final, temporary):
                try:
                    save(out_dir, filename_tmpl=literal, create_symlink=False, **kwargs)
                except (OSError, RuntimeError) as error:  # a full disk: one line
                    raise _no_space(error, temporary, final) from None
            if create_symlink:
                mmcv.symlink(filename, str(Path(out_dir) / "latest.pth"))

        return save_checkpoint

    def _no_space(error: BaseException, temporary: Path, final: Path) -> BaseException:
        """A write that failed for lack of space or quota is NoSpaceError naming the file and
        (at least) the bytes it needed: the size of the newest complete checkpoint, or what
        was written when it failed (`atomically` then removes the partial file)."""
        from experiments.run.record import NoSpaceError, free_bytes, no_space

        written = temporary.stat().st_size if temporary.exists() else 0
        previous = [p.stat().st_size for p in final.parent.glob("iter_*.pth")]
        needed = max([written, *previous])
        free = free_bytes(final.parent)
        if free is not None:
            free += written  # free once `atomically` has removed the partial file
        if no_space(error) is None and (free is None or needed <= free):
            return error
        return NoSpaceError(final, needed, no_space(error), at_least=True)

    return ExperimentsCheckpointHook


def _stop_hook() -> type:
    from mmcv.runner import Hook

    class ExperimentsStopHook(Hook):
        """After each iteration (lowest priority: the iteration is recorded and any periodic
        checkpoint written), the ranks agree whether any got SIGTERM/SIGUSR2; if so rank 0
        saves this iteration (unless the checkpoint hook just did), all ranks wait for it,
        and GracefulStop hands the signal over (submitit requeues on SIGUSR2) and exits."""

        def __init__(self, stop: GracefulStop, distributed: bool) -> None:
            self.stop = stop  # installed by the engine before training starts
            self.distributed = distributed

        def _any_rank(self, flag: bool) -> bool:
            if not self.distributed:
                return flag
            import torch
            import torch.distributed as dist

            from experiments import distributed_env

            # On the backend's device: NCCL ranks (train_model on CUDA) take CUDA tensors only.
            value = distributed_env.collective_tensor([1 if flag else 0], dtype=torch.int32)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
            return bool(value.item())

        def after_train_iter(self, runner: Any) -> None:
            if not self.stop.requested(self._any_rank):
                return
            done = runner.iter + 1
            checkpoint = next(
                (h for h in runner.hooks if type(h).__name__ == CHECKPOINT_HOOK), None
            )
            if checkpoint is not None and checkpoint.saved_iter != done:
                checkpoint.save_now(runner)
            if self.distributed:
                import torch.distributed as dist

                dist.barrier()  # rank 0's checkpoint is on disk before any rank exits
            log.warning(
                "stopping at iteration %d on signal %s; checkpoint saved",
                done,
                signal.Signals(self.stop.received).name if self.stop.received else "of a peer",
            )
            self.stop.hand_over()

    return ExperimentsStopHook


def split_losses(log_vars: dict[str, Any]) -> dict[str, float]:
    """MMGen logs each loss term (loss_disc_fake, loss_disc_real, loss_gp, ... for the
    discriminator; loss_disc_fake_g, ... for the generator: the `_g` suffix). Their sums are
    the two numbers a user compares across runs."""
    terms = {k: v for k, v in log_vars.items() if k.startswith("loss_") and k != "loss"}
    terms = {k: v for k, v in terms.items() if k not in ("loss_gen", "loss_disc")}
    gen = [v for k, v in terms.items() if k.endswith("_g")]
    disc = [v for k, v in terms.items() if not k.endswith("_g")]
    losses = {}
    if gen:
        losses["loss_gen"] = float(sum(gen))
    if disc:
        losses["loss_disc"] = float(sum(disc))
    return losses


def logged(runner: Any, interval: int) -> dict[str, float] | None:
    """The iteration's losses (with `split_losses`) every `interval` iterations and at the
    last one; None in between."""
    done = runner.iter + 1  # mmcv counts the iteration after its hooks
    if done % interval and done != runner.max_iters:
        return None
    log_vars = runner.outputs.get("log_vars", {})
    record = {k: float(v) for k, v in log_vars.items() if isinstance(v, (int, float))}
    record.update(split_losses(record))
    return record


def early_stopping_hook(
    monitor: Monitor, interval: int, measure: Callable[[], dict[str, Any]] | None = None
) -> Any:
    """The mmcv side of the monitor every engine uses (run/early_stopping.py): keeps `best.pth`
    beside MMGen's iter_N.pth when the metric improved and ends the runner after this iteration
    when patience is used up (its checkpoint and record hooks then save and record it).
    `measure` (a pruned search's trial, rank 0): quality metrics merged into each record."""
    from mmcv.runner import HOOKS, Hook

    name = "ExperimentsEarlyStoppingHook"
    if name not in HOOKS.module_dict:

        class ExperimentsEarlyStoppingHook(Hook):
            def __init__(self, monitor: Monitor, interval: int, measure: Any) -> None:
                self.monitor = monitor
                self.interval = interval
                self.measure = measure

            def after_train_iter(self, runner: Any) -> None:
                record = logged(runner, self.interval)
                if record is None:
                    return
                if self.measure is not None:
                    record.update(self.measure())
                done = runner.iter + 1
                verdict = self.monitor.after_evaluation(done, None, record)
                if verdict.improved:
                    self._save_best(runner)
                if verdict.stop and done < runner.max_iters:
                    runner._max_iters = done  # the runner's loop ends after this iteration

            def _save_best(self, runner: Any) -> None:
                from mmcv.runner import CheckpointHook

                checkpoint = next((h for h in runner.hooks if isinstance(h, CheckpointHook)), None)
                if checkpoint is None:
                    return
                out = Path(checkpoint.out_dir)
                if runner.rank == 0:  # atomic, as our checkpoint hook writes iter_N.pth
                    out.mkdir(parents=True, exist_ok=True)
                    with atomically(out / "best.pth", out / ".best.pth.partial"):
                        runner.save_checkpoint(
                            str(out), filename_tmpl=".best.pth.partial", create_symlink=False
                        )
                self.monitor.kept(out / "best.pth")

        HOOKS.register_module(name=name, module=ExperimentsEarlyStoppingHook)
    # ABOVE_NORMAL: before the checkpoint hook (NORMAL), which then saves the last iteration
    return dict(
        type=name, monitor=monitor, interval=interval, measure=measure, priority="ABOVE_NORMAL"
    )
