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
    assert shape_problems() == ["train_classification has no local 'global_steps' (read by "
                                "the seam's hooks)"]  # fmt: skip


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
    assert asked == [{"checkpoint_id": "x", "process_group": one, "no_dist": True},
                     {"checkpoint_id": "y"}]  # fmt: skip
