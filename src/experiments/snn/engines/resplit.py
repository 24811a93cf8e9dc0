"""A CPU-engine checkpoint re-split for another TP/PP layout (resume under another topology).

A checkpoint holds one file per (pipeline stage, tensor-parallel shard), each with the full
state over the data-parallel ranks. To resume it under another pp x tp, every rank reads all
of the old files and rebuilds the canonical (single-process) state with the model builder's
own functions, SpikingJelly's: `merge_state_dicts` for the model, the stage key maps and the
TP merge/shard of one tensor for the optimizer state, then `_canonical_key_map` and
`_shard_tensor_parallel_tensor` cut out this rank's stage and shard. Optimizer state follows
its parameter (a momentum or Adam moment is sharded as the parameter is; a step count is
kept); the scheduler, the RNG and the data position are shard (0, 0)'s, as every rank saved
the same. The models' own parameter shapes on this rank are the targets, so a layout the
builder cannot produce fails loudly instead of loading a wrong shard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from experiments.run import checkpoint


def _is_sharded_like(value: Any, reference: torch.Tensor) -> bool:
    return isinstance(value, torch.Tensor) and value.ndim == reference.ndim and value.ndim > 0


def _merge(builder: Any, name: str, values: list[Any], reference: torch.Tensor) -> Any:
    """One optimizer-state entry from its TP shards (in TP rank order)."""
    first = values[0]
    if not _is_sharded_like(first, reference) or first.shape == reference.shape:
        return first  # a step count, or the state of a replicated parameter
    return builder._merge_tensor_parallel_shards(name, values, reference)


def _split(builder: Any, name: str, value: Any, target: torch.Tensor, rank: int, size: int) -> Any:
    if not _is_sharded_like(value, target) or value.shape == target.shape:
        return value
    return builder._shard_tensor_parallel_tensor(name, value, target, rank, size)


def load(
    path: Path,
    meta: dict[str, Any],
    builder: Any,
    pp_rank: int,
    pp_size: int,
    tp_rank: int,
    tp_size: int,
    current: tuple[dict[str, torch.Tensor], dict[str, Any]],
) -> dict[str, Any]:
    """This rank's state (model, optimizer, scheduler, rng) from the checkpoint at `path`,
    written under another pp x tp. `current`: this rank's own full model and optimizer
    state dicts now (get_state_dict), whose names and shapes the result takes."""
    _, old_pp, old_tp = (int(n) for n in meta["mesh"]["shape"])
    shards = {
        (pp, tp): torch.load(
            path / checkpoint.shard_name(pp, tp), map_location="cpu", weights_only=True
        )
        for pp in range(old_pp)
        for tp in range(old_tp)
    }
    canonical_model = builder._build_canonical_model()
    reference = canonical_model.state_dict()
    model = builder.merge_state_dicts(
        [(pp, tp, state["model"]) for (pp, tp), state in shards.items()],
        pipeline_size=old_pp,
        tensor_size=old_tp,
    )
    old_maps = {pp: builder._canonical_key_map(pp, old_pp, canonical_model) for pp in range(old_pp)}
    gathered: dict[str, dict[str, list[tuple[int, Any]]]] = {}
    for (pp, tp), state in sorted(shards.items()):
        for local, fields in state["optimizer"].get("state", {}).items():
            name = old_maps[pp][local]
            for field, value in fields.items():
                gathered.setdefault(name, {}).setdefault(field, []).append((tp, value))
    optimizer_state = {
        name: {
            field: _merge(builder, name, [v for _, v in sorted(values)], reference[name])
            for field, values in fields.items()
        }
        for name, fields in gathered.items()
    }

    model_now, optimizer_now = current
    new_map = builder._canonical_key_map(pp_rank, pp_size, canonical_model)
    if set(new_map) != set(model_now):
        raise checkpoint.CheckpointError(
            f"{path}: the builder's stage {pp_rank} of {pp_size} does not match this rank's model"
        )
    local_model = {
        local: _split(builder, name, model[name], model_now[local], tp_rank, tp_size)
        for local, name in new_map.items()
    }
    local_optimizer = {
        local: {
            field: _split(builder, name, value, model_now[local], tp_rank, tp_size)
            for field, value in optimizer_state[name].items()
        }
        for local, name in new_map.items()
        if name in optimizer_state
    }
    saved_groups = shards[(0, 0)]["optimizer"].get("param_groups", [])
    groups = []
    for number, group in enumerate(optimizer_now.get("param_groups", [])):
        hyper = saved_groups[number] if number < len(saved_groups) else {}
        groups.append({**group, **{k: v for k, v in hyper.items() if k != "params"}})
    first = shards[(0, 0)]
    return {
        "model": local_model,
        "optimizer": {"state": local_optimizer, "param_groups": groups},
        "scheduler": first.get("scheduler", {}),
        "rng": first["rng"],
    }
