"""Resuming an SNN run under another topology (issue 28), checked before launch.

The CPU engine's checkpoints hold, per (pp, tp) shard, the full model and optimizer state
over the data-parallel ranks (`get_state_dict(full_state_dict=True)`: FSDP2's shards
gathered, DDP's replica once). So a checkpoint does not depend on the data-parallel layout:
DDP <-> FSDP2, more or fewer data-parallel ranks, local <-> torchrun <-> Slurm all load the
same files, and the sampler position (a per-rank batch index) means the same samples as long
as the global batch is the same. A different TP/PP split is re-split from all the shards by
the model builder's own merge and shard functions (engines/resplit.py); a model whose
builder has no merge is refused naming the sizes that resume. The engine checks the global
batch again when it loads (engines/cpu.py), so a worker, whose config the launching process
has already rewritten, agrees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.run import checkpoint
from experiments.run.reshard import global_batch_refused, newest_meta, refuse, resharded

# TrainingConfig fields a checkpoint may differ in after a data-parallel reshard.
RECIPE_FIELDS = ("data_parallel", "batch_size", "pipeline_microbatches")
# ... and after a TP/PP re-split (engines/resplit.py).
RESPLIT_FIELDS = (*RECIPE_FIELDS, "tensor_parallel_size", "pipeline_parallel_size")


def global_batch(meta: dict[str, Any]) -> int:
    dp = int(meta["mesh"]["shape"][0])
    return dp * int(meta["recipe"]["batch_size"])


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
    """The CPU engine resumes a data-parallel reshard; TP/PP changes and the other engines
    are refused, and so is a global batch that would change (unless allowed). The same holds
    for `resume=<checkpoint dir>` of another run, whatever topology wrote it."""
    named = None
    if resume not in (None, "auto") and engine == "cpu":
        path = Path(str(resume))
        try:
            named = path, checkpoint.read_meta(path)
        except (OSError, ValueError):
            named = None  # the engine says what is wrong with it, as before
    if not resharded(extensions) and named is None:
        return
    if engine == "spikingjelly":
        refuse(
            "SpikingJelly's train_classification",
            extensions,
            "it resumes its step_N/ checkpoints only under the recipe that wrote them, "
            "topology included: distributed/vision/training.py compares config.json",
        )
    if engine == "classify":
        refuse("the classic Trainer", extensions, "its checkpoint holds the DDP replica it ran")
    found = named or newest_meta(run_dir)
    if found is None or "mesh" not in found[1]:
        return  # nothing to reshard: the run starts from its beginning
    path, meta = found
    old_dp, old_pp, old_tp = (int(n) for n in meta["mesh"]["shape"])
    new_dp, new_pp, new_tp = dims.mesh_shape
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
    old, new = global_batch(meta), new_dp * batch_size
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
