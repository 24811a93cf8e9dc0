"""Resuming an SNN run under another topology (issue 28), checked before launch.

A checkpoint holds, per (pp, tp) folder, the full state over the data-parallel ranks
(`full_state_dict=True`), so any data-parallel layout or launcher loads it, and the sampler
position means the same samples while the global batch is the same. Another TP/PP split is
re-split by the model builder's own merge and shard functions
(engines/spikingjelly_resume.py); a builder with no merge is refused naming the sizes that
resume. The loop checks the same again, so a worker agrees with its launching process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.run.reshard import global_batch_refused, refuse, resharded
from experiments.snn.engines.spikingjelly_checkpoints import (
    read_mesh,
    read_recipe,
    scan_checkpoints,
)


def newest_checkpoint(root: Path) -> tuple[Path, dict[str, Any] | None] | None:
    """The newest complete checkpoint under `root` and its mesh record (None: written
    without one), or None when there is no complete checkpoint."""
    complete, _ = scan_checkpoints(root)
    return (complete[0], read_mesh(complete[0])) if complete else None


def check(
    run_dir: Path,
    extensions: list[str],
    engine: str,
    dims: Any,
    batch_size: int,
    allow_batch_change: bool,
    resume: Any = None,
    can_resplit: bool = False,
) -> None:
    """A data-parallel reshard resumes; a TP/PP change resumes where the builder can merge;
    the classic Trainer refuses any; so is a global batch that would change (unless
    allowed). The same holds for `resume=<checkpoint dir>` of another run, whatever topology
    wrote it."""
    named = None
    if resume not in (None, "auto") and engine != "classify":
        path = Path(str(resume))
        named = (path, read_mesh(path)) if (path / "config.json").is_file() else None
    if not resharded(extensions) and named is None:
        return
    if engine == "classify":
        refuse("the classic Trainer", extensions, "its checkpoint holds the DDP replica it ran")
    found = named or newest_checkpoint(run_dir / "checkpoints")
    if found is None:
        return  # nothing to reshard: the run starts from its beginning
    path, mesh = found
    new_dp, new_pp, new_tp = dims.mesh_shape
    if mesh is None:
        recipe = read_recipe(path)
        old = (int(recipe["pipeline_parallel_size"]), int(recipe["tensor_parallel_size"]))
        if resharded(extensions) or old != (new_pp, new_tp):
            raise ConfigError(
                "topology",
                dims.describe(),
                f"the recorded topology: {path} was written without mesh.json (the "
                "data-parallel size it trained at), so it resumes only as it was written",
            )
        return
    old_dp, old_pp, old_tp = (int(n) for n in mesh["mesh"]["shape"])
    if (old_pp, old_tp) != (new_pp, new_tp) and not can_resplit:
        raise ConfigError(
            "topology",
            f"pp={new_pp} x tp={new_tp}",
            f"pp={old_pp} x tp={old_tp}: {path} was split into {old_pp} pipeline stage(s) x "
            f"{old_tp} tensor-parallel shard(s), and this model's builder has no merge of "
            "its shards to re-split them from; keep topology.pipeline_parallel_size and "
            "topology.tensor_parallel_size as recorded (the data-parallel size, DDP/FSDP2 "
            "and the launcher may change)",
        )
    old, new = int(mesh["global_batch"]), new_dp * batch_size
    if old != new and not allow_batch_change:
        keeps = [f"trainer.global_batch_size={old}"]
        if old % new_dp == 0:
            keeps.append(f"trainer.batch_size={old // new_dp}")
        raise global_batch_refused(
            "trainer.batch_size",
            batch_size,
            path,
            old,
            f"{old_dp} data-parallel rank(s) x {old // old_dp}",
            f"dp={new_dp} x {batch_size}",
            new,
            keeps,
        )
