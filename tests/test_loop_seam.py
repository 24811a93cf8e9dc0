"""The one seam into SpikingJelly's `train_classification` (snn/engines/spikingjelly_loop.py)
reads names of the installed loop: module globals it replaces while the loop runs, locals it
reads from the loop's frame, and the two `torch.cuda.synchronize(device)` calls a step makes.
Here the installed loop is read the way the seam reads it, so an upgrade of SpikingJelly that
moves any of them fails this test, naming the version installed and the one the seam was
written against, instead of a run failing (or silently recording nothing) mid-training."""

from __future__ import annotations

import inspect
import tomllib
import types
from importlib import metadata

from spikingjelly.activation_based.distributed.vision import training

from experiments.snn.engines import spikingjelly_loop as seam

from .conftest import REPO


def _code_tree(code: types.CodeType) -> list[types.CodeType]:
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [code, *(tree for c in nested for tree in _code_tree(c))]


def shape_problems() -> list[str]:
    loop = training.train_classification.__code__
    tree = _code_tree(loop) + _code_tree(training._evaluate.__code__)
    globals_used = {name for code in tree for name in code.co_names}
    own = set(loop.co_varnames) | set(loop.co_cellvars)
    problems = [
        f"module global {name} (replaced while the loop runs) is not used by the loop"
        for name in seam.REPLACED
        if not hasattr(training, name) or name not in globals_used
    ]
    problems += [
        f"train_classification has no local {name!r} (read by the seam's hooks)"
        for name in (*seam.STEP_LOCALS, *seam.EVALUATION_LOCALS)
        if name not in own
    ]
    steps = [code for code in tree if code.co_name == "train_step"]
    problems += [
        f"train_step has no local {name!r} (read by gradient accumulation)"
        for name in seam.TRAIN_STEP_LOCALS
        if not steps or name not in set(steps[0].co_varnames) | set(steps[0].co_freevars)
    ]
    problems += [
        f"train_classification has no local {name!r} (read by timm's Mixup in its mixup place)"
        for name in seam.MIXUP_LOCALS
        if name not in own
    ]
    if f"v2.{seam.MIXUP_BUILT}(" not in inspect.getsource(training.train_classification):
        problems.append(
            f"train_classification builds no v2.{seam.MIXUP_BUILT}(...) (the mixup place "
            "timm's Mixup takes)"
        )
    calls = inspect.getsource(training.train_classification).count("torch.cuda.synchronize(device)")
    if calls != seam.SYNCHRONIZE_CALLS:
        problems.append(
            f"the loop calls torch.cuda.synchronize(device) {calls} times per step, the step "
            f"hook counts {seam.SYNCHRONIZE_CALLS}"
        )
    return problems


def test_the_installed_loop_has_the_shape_the_seam_reads() -> None:
    installed = metadata.version("spikingjelly")
    problems = shape_problems()
    assert not problems, (
        f"SpikingJelly {installed}'s train_classification is not the loop the seam "
        f"(src/experiments/snn/engines/spikingjelly_loop.py) was written against "
        f"(spikingjelly {seam.WRITTEN_AGAINST}): " + "; ".join(problems)
    )


def test_the_version_the_seam_reads_is_the_one_pinned_and_installed() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert f"spikingjelly=={seam.WRITTEN_AGAINST}" in project["dependencies"]
    assert metadata.version("spikingjelly") == seam.WRITTEN_AGAINST, (
        f"spikingjelly {metadata.version('spikingjelly')} is installed; the seam was written "
        f"against {seam.WRITTEN_AGAINST}: run this test file, then update "
        "spikingjelly_loop.py and the pin together"
    )


def test_a_loop_of_another_shape_is_reported_by_name(monkeypatch) -> None:
    """The check itself: a loop whose step hook would miss a local is named."""
    monkeypatch.setattr(seam, "STEP_LOCALS", (*seam.STEP_LOCALS, "global_steps"))
    assert shape_problems() == [
        "train_classification has no local 'global_steps' (read by the seam's hooks)"
    ]


def test_the_librarys_one_rank_checkpoint_saves_run_uncoordinated(monkeypatch) -> None:
    """The library gives each checkpoint writer a process group of its own: DCP's save into
    a group of one rank is asked for without its coordination (`no_dist=True`: the same
    files, no object collectives; with them every later step of a CPU rank ran 25-30 %
    slower, BENCHMARKS.md). Any other group, or none, is passed on as the library asked."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    asked: list[dict] = []
    monkeypatch.setattr(dcp, "async_save", lambda *args, **kwargs: asked.append(kwargs))
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        one = dist.new_group([0], backend="gloo")
        with seam._one_writer_uncoordinated(one):
            dcp.async_save({}, checkpoint_id="x", process_group=one)
        with seam._one_writer_uncoordinated(None):
            dcp.async_save({}, checkpoint_id="y")
    finally:
        dist.destroy_process_group()
    assert asked == [
        {"checkpoint_id": "x", "process_group": one, "no_dist": True},
        {"checkpoint_id": "y"},
    ]


def test_a_cpu_rank_keeps_the_memory_a_step_frees() -> None:
    """A step's pattern (large buffers allocated, all freed, again), in two fresh processes:
    glibc as it starts hands the freed memory back and faults it in again every step; after
    `keep_freed_memory` (the engine calls it on CPU ranks) the pages stay mapped. Measured in
    SpikingJelly's loop: 28,000 minor faults a step before, 0 after (bench/snn_step_costs.py)."""
    import sys

    from .support import processes

    probe = (
        "import resource, sys\n"
        "if sys.argv[1] == 'tuned':\n"
        "    from experiments.snn.engines.spikingjelly_cpu import keep_freed_memory\n"
        "    assert keep_freed_memory()\n"
        "faults = []\n"
        "for _ in range(12):\n"
        "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    buffers = [bytearray(6 << 20) for _ in range(5)]\n"
        "    del buffers\n"
        "    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
        "print(sorted(faults[2:])[len(faults[2:]) // 2])\n"
    )
    per_step = {}
    for arm in ("untuned", "tuned"):
        done = processes.run([sys.executable, "-c", probe, arm], timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        per_step[arm] = int(done.stdout)
    assert per_step["untuned"] > 5000, per_step  # 30 MB a step: ~7,700 pages faulted again
    assert per_step["tuned"] < per_step["untuned"] / 20, per_step
