"""Test-only fault injection. Python imports this module at start-up when a test puts this
folder on a child's PYTHONPATH; the package itself reads no fault switch.

EXPERIMENTS_TEST_KILL_DURING_SAVE=N: the process SIGKILLs itself while saving the step-N
checkpoint, after torch's DCP writer has put its shard's data files on disk and before it
writes the shard's `.metadata` (the last file of a complete checkpoint): a crash in the
middle of a save.

EXPERIMENTS_TEST_FAIL_RANK=R: the torch.distributed rank R (RANK in its environment) raises
RuntimeError("injected failure on rank R") instead of joining the process group, while its
peers wait there for it: one rank of a job that dies before its peers can notice.

EXPERIMENTS_TEST_FAIL_PLAN_RANK=R: in a Slurm task (submitit's) of rank R, planning the run
(experiments.plan.build_plan) raises RuntimeError("injected planning failure on rank R"): a
rank that fails before its run starts, while its peers go on to the rendezvous.

EXPERIMENTS_TEST_HIDE_MODULES=a,b: those top-level packages cannot be found or imported, as on
a machine where they are not installed.

EXPERIMENTS_TEST_KILL_POINT=NAME: the run whose directory is named NAME (a sweep point, e.g.
"1") SIGKILLs itself when it saves its first checkpoint: a point that crashes hard.

EXPERIMENTS_TEST_KILL_DURING_GAN_SAVE=N: the process writing a GAN checkpoint of iteration N
(MMGen's torch.save into a file named iter_N.pth, under whatever temporary name) writes half
of it, syncs it and SIGKILLs itself: a crash in the middle of a checkpoint write. Under
torchrun only in the first round (TORCHELASTIC_RESTART_COUNT 0): the restarted ranks go on.

EXPERIMENTS_TEST_FAIL_CSV_LOG=N: the CSV logger's Nth `log` call raises OSError (a store that
fails mid-run, e.g. its disk gone): the run must drop that logger and go on.

EXPERIMENTS_TEST_RECORD_READS=DIR: every index a DataLoader reads from a map-style dataset
(torch's own fetcher, in the process or its loader workers) is appended to DIR/rank<RANK>.txt:
what each rank read, whatever the dataset (MMGen's image folders included).

EXPERIMENTS_TEST_SKIP_CIFAR_MD5=1: torchvision's CIFAR10/CIFAR100 read their files with every
checksum None (tests/support/datasets.py, skip_cifar_md5): the tests' synthetic CIFAR batches
cannot match the real archive's md5s; a user's run keeps the check.

EXPERIMENTS_TEST_STEP_SLEEP=S: every optimizer step sleeps S seconds after it (a global torch
optimizer hook): a run that a test only needs to keep going until a signal or a time limit
arrives leaves the CPU to the rest of the suite instead of training flat out.

EXPERIMENTS_TEST_RECORD_GC=DIR: the garbage collector's thresholds and how many objects it has
frozen (gc.get_freeze_count), as this process started (before our package is imported) and
after every optimizer step (a global torch optimizer hook), appended to DIR/<pid>.txt: the
loop's steps run under the collector a process starts with, what start-up left alive frozen
(src/experiments/garbage_collection.py; read by tests/support/gc_records.py).
"""

import os

_KILL_DURING_SAVE = os.environ.get("EXPERIMENTS_TEST_KILL_DURING_SAVE")
_KILL_POINT = os.environ.get("EXPERIMENTS_TEST_KILL_POINT")


def _kill_during_save(kill_step: int) -> None:
    import functools
    import signal
    from pathlib import Path

    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    original = FileSystemWriter.finish
    folder = f"step_{kill_step:08d}"

    @functools.wraps(original)
    def finish(self, *args, **kwargs):
        # The writer's path is <run>/checkpoints/step_N/pp_*_tp_*: its data files are written,
        # its .metadata (written by this call) is not.
        if Path(str(self.path)).parent.name == folder:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)

    FileSystemWriter.finish = finish


if _KILL_DURING_SAVE:
    _kill_during_save(int(_KILL_DURING_SAVE))


def _kill_point(name: str) -> None:
    import functools
    import signal
    from pathlib import Path

    from spikingjelly.activation_based.distributed.vision import training

    original = training._save_checkpoint

    @functools.wraps(original)
    def save(path, *args, **kwargs):
        if Path(path).parent.parent.name == name:  # <run>/checkpoints/step_N
            os.kill(os.getpid(), signal.SIGKILL)
        return original(path, *args, **kwargs)

    training._save_checkpoint = save


if _KILL_POINT:
    _kill_point(_KILL_POINT)


_FAIL_RANK = os.environ.get("EXPERIMENTS_TEST_FAIL_RANK")


def _fail_rank(rank: str) -> None:
    import functools

    import torch.distributed

    original = torch.distributed.init_process_group

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        if os.environ.get("RANK") == rank:
            raise RuntimeError(f"injected failure on rank {rank}")
        return original(*args, **kwargs)

    torch.distributed.init_process_group = init_process_group


if _FAIL_RANK:
    _fail_rank(_FAIL_RANK)


_HIDE = os.environ.get("EXPERIMENTS_TEST_HIDE_MODULES")


def _hide(names: set[str]) -> None:
    import sys

    class Hidden:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in names:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Hidden())


if _HIDE:
    _hide(set(_HIDE.split(",")))


_KILL_DURING_GAN_SAVE = os.environ.get("EXPERIMENTS_TEST_KILL_DURING_GAN_SAVE")


def _kill_during_gan_save(iteration: str) -> None:
    import functools
    import io
    import signal

    import torch

    original = torch.save
    target = f"iter_{iteration}.pth"

    @functools.wraps(original)
    def save(obj, f, *args, **kwargs):
        name = os.path.basename(str(getattr(f, "name", f)))
        if target not in name or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
            return original(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        original(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        if hasattr(f, "write"):
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
        else:
            with open(f, "wb") as handle:
                handle.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    torch.save = save


if _KILL_DURING_GAN_SAVE:
    _kill_during_gan_save(_KILL_DURING_GAN_SAVE)


_RECORD_READS = os.environ.get("EXPERIMENTS_TEST_RECORD_READS")


def _record_reads(folder: str) -> None:
    import functools

    from torch.utils.data._utils import fetch

    original = fetch._MapDatasetFetcher.fetch

    @functools.wraps(original)
    def record(self, possibly_batched_index):
        indices = possibly_batched_index if self.auto_collation else [possibly_batched_index]
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"rank{os.environ.get('RANK', '0')}.txt")
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(f"{int(index)}\n" for index in indices))
        return original(self, possibly_batched_index)

    fetch._MapDatasetFetcher.fetch = record


if _RECORD_READS:
    _record_reads(_RECORD_READS)


_FAIL_CSV_LOG = os.environ.get("EXPERIMENTS_TEST_FAIL_CSV_LOG")


def _fail_csv_log(call: int) -> None:
    import functools

    from experiments.loggers import csv

    original = csv.CSVLogger.log
    calls = [0]

    @functools.wraps(original)
    def log(self, metrics, step):
        calls[0] += 1
        if calls[0] == call:
            raise OSError(f"injected failure of the CSV logger at step {step}")
        return original(self, metrics, step)

    csv.CSVLogger.log = log


if _FAIL_CSV_LOG:
    _fail_csv_log(int(_FAIL_CSV_LOG))


_STEP_SLEEP = os.environ.get("EXPERIMENTS_TEST_STEP_SLEEP")


def _step_sleep(seconds: float) -> None:
    import time

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(lambda *_: time.sleep(seconds))


if _STEP_SLEEP:
    _step_sleep(float(_STEP_SLEEP))


_FAIL_PLAN_RANK = os.environ.get("EXPERIMENTS_TEST_FAIL_PLAN_RANK")


def _fail_plan_rank(rank: str) -> None:
    import functools

    from experiments import plan

    original = plan.build_plan

    @functools.wraps(original)
    def build_plan(*args, **kwargs):
        raise RuntimeError(f"injected planning failure on rank {rank}")

    plan.build_plan = build_plan


if (
    _FAIL_PLAN_RANK
    and os.environ.get("SUBMITIT_EXECUTOR") == "slurm"
    and os.environ.get("SLURM_PROCID") == _FAIL_PLAN_RANK
):
    _fail_plan_rank(_FAIL_PLAN_RANK)


def _skip_cifar_md5() -> object:
    """tests/support/datasets.py's skip_cifar_md5, entered for the whole process (loaded by
    its path: this folder is the only one of the tests on the child's PYTHONPATH)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "datasets.py"
    spec = importlib.util.spec_from_file_location("_test_datasets", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    skipped = module.skip_cifar_md5()
    skipped.__enter__()
    return skipped


if os.environ.get("EXPERIMENTS_TEST_SKIP_CIFAR_MD5") == "1":
    # kept referenced: a context manager collected would run its exit and restore the checks
    _CIFAR_MD5_SKIPPED = _skip_cifar_md5()


_RECORD_GC = os.environ.get("EXPERIMENTS_TEST_RECORD_GC")


def _record_gc(folder: str) -> None:
    import gc

    from torch.optim.optimizer import register_optimizer_step_post_hook

    def state() -> str:
        return " ".join(map(str, [*gc.get_threshold(), gc.get_freeze_count()]))

    started = state()  # before our package is imported

    def after_step(*_) -> None:
        # By the pid at each step: a forked process (a warm sweep point) has a file of its own.
        path = os.path.join(folder, f"{os.getpid()}.txt")
        first = not os.path.exists(path)
        os.makedirs(folder, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            if first:
                handle.write(f"start {started}\n")
            handle.write(f"step {state()}\n")

    register_optimizer_step_post_hook(after_step)


if _RECORD_GC:
    _record_gc(_RECORD_GC)
