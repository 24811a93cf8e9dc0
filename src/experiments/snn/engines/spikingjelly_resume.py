"""Resuming SpikingJelly's loop: which of its checkpoints, under which layout.

Around the library's `_load_checkpoint` (replaced through spikingjelly_loop.py):
candidates are tried newest first, so a checkpoint unreadable on any rank is skipped on all
and every rank resumes from the same step (all failing is a CheckpointError: starting over
would lose the run's work). Each (pp, tp) folder holds the full data-parallel state, so
another data-parallel layout loads through the library once its recipe check allows the
layout fields (`RECIPE_FIELDS`); another pp x tp split is re-split here with the model
builder's own merge/shard functions. Which changes can be resumed is decided before launch
by snn/reshard.py, with the same rules, so a worker agrees with its launching process.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from experiments import collectives
from experiments.run.checkpoint import CheckpointError
from experiments.snn.engines.spikingjelly_checkpoints import (
    read_mesh,
    read_recipe,
    read_shard,
    shard_folder,
    unwrapped,
    weights_only,
)

log = logging.getLogger(__name__)

# TrainingConfig fields a checkpoint may differ in after a data-parallel reshard ...
RECIPE_FIELDS = ("data_parallel", "batch_size", "pipeline_microbatches")
# ... and after a TP/PP re-split.
RESPLIT_FIELDS = (*RECIPE_FIELDS, "tensor_parallel_size", "pipeline_parallel_size")


def _sizes(recipe: dict[str, Any]) -> tuple[int, int]:
    return int(recipe["pipeline_parallel_size"]), int(recipe["tensor_parallel_size"])


class Resume:
    """One run's resume: `candidates` newest first (rank 0's list, the same on every rank);
    `loaded(path, step)` is told which one every rank loaded."""

    def __init__(
        self,
        candidates: list[Path],
        data_parallel_size: int,
        allow_global_batch_change: bool,
        loaded: Callable[[Path, int], None],
    ) -> None:
        self.candidates = candidates
        self.dp_size = data_parallel_size
        self.allow_batch_change = allow_global_batch_change
        self.loaded = loaded

    def wrap(self, original: Callable[..., Any], training: Any) -> Callable[..., Any]:
        def load_checkpoint(path: Path, **state: Any) -> tuple[int, int, int]:
            failures = []
            for candidate in self.candidates:
                try:
                    progress = self._load(original, training, Path(candidate), state)
                    error = None
                except CheckpointError:
                    raise  # another config: the same answer on every rank
                except BaseException as exception:  # truncated or corrupt files raise many types
                    if isinstance(exception, (KeyboardInterrupt, SystemExit)):
                        raise
                    cause = unwrapped(exception)  # DCP's CheckpointException: the rank's error
                    progress, error = None, f"{candidate}: {type(cause).__name__}: {cause}"
                if collectives.all_true(error is None):
                    assert progress is not None
                    self.loaded(Path(candidate), progress[0])
                    return progress
                reason = error or "a shard on another rank cannot be loaded"
                log.warning(
                    "checkpoint %s cannot be loaded (%s); trying the previous one",
                    candidate,
                    reason,
                )
                failures.append(reason)
            raise CheckpointError("no checkpoint can be loaded: " + "; ".join(failures))

        return load_checkpoint

    def _load(
        self, original: Callable[..., Any], training: Any, path: Path, state: dict[str, Any]
    ) -> tuple[int, int, int]:
        config = state["config"]
        saved, current = read_recipe(path), training._recipe(config)
        mesh = read_mesh(path)
        resplit = _sizes(saved) != _sizes(current)
        layout = (RESPLIT_FIELDS if resplit else RECIPE_FIELDS) if mesh else ()
        differing = sorted(
            key
            for key in set(saved) | set(current)
            if key not in layout and saved.get(key) != current.get(key)
        )
        if differing:
            raise CheckpointError(
                f"checkpoint {path} was written by a different config (differs in: "
                f"{', '.join(differing)}); resume=null starts over, or use another hydra.run.dir"
            )
        if resplit:
            step, epoch, batch = _load_resplit(path, training, state, _sizes(saved))
        else:
            with _recipe_allowing(training, saved, layout), weights_only():
                step, epoch, batch = original(path, **state)
        return step, epoch, self._position(path, mesh, config.batch_size, batch)

    def _position(
        self, path: Path, mesh: dict[str, Any] | None, batch_size: int, batch: int
    ) -> int:
        """Where in its epoch the checkpoint resumes under this run's global batch."""
        old = int(mesh["global_batch"]) if mesh else None
        new = batch_size * self.dp_size
        if old is None or old == new:
            return batch
        if not self.allow_batch_change:
            raise CheckpointError(
                f"checkpoint {path} trained at a global batch of {old}, this run at {new}: "
                "keep it (trainer.global_batch_size), or trainer.allow_global_batch_change=true"
            )
        return batch * old // new


def _recipe_allowing(
    training: Any, saved: dict[str, Any], fields: tuple[str, ...]
) -> contextlib.AbstractContextManager[Any]:
    """The library's recipe comparison, told that `fields` may differ: the recipe it computes
    for this run takes the checkpoint's values of those fields while it loads."""
    base = training._recipe

    def recipe(config: Any) -> dict[str, Any]:
        return {**base(config), **{key: saved[key] for key in fields if key in saved}}

    return mock.patch.object(training, "_recipe", recipe)


def _load_resplit(
    path: Path, training: Any, state: dict[str, Any], written: tuple[int, int]
) -> tuple[int, int, int]:
    """This rank's state re-split from a checkpoint of another pp x tp, set as the library's
    `_load_checkpoint` sets a checkpoint of its own layout."""
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict,
        set_optimizer_state_dict,
        set_state_dict,
    )

    config, model, optimizer = state["config"], state["model"], state["optimizer"]
    options = training._state_dict_options()
    old_pp, old_tp = written
    shards = {
        (pp, tp): read_shard(path / shard_folder(pp, tp))
        for pp in range(old_pp)
        for tp in range(old_tp)
    }
    builder = config.model.get_builder_cls()(config.model)
    local = resplit(
        shards,
        builder,
        written,
        (state["pp_rank"], config.pipeline_parallel_size),
        (state["tp_rank"], config.tensor_parallel_size),
        get_state_dict(model, optimizer, options=options),
        path,
    )
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model.module.load_state_dict(local["model"], strict=True)
        set_optimizer_state_dict(
            model, optimizer, optim_state_dict=local["optimizer"], options=options
        )
    else:
        set_state_dict(
            model,
            optimizer,
            model_state_dict=local["model"],
            optim_state_dict=local["optimizer"],
            options=options,
        )
    first = shards[(0, 0)]
    if state["scheduler"] is not None:
        state["scheduler"].load_state_dict(first.get("scheduler", {}))
    state["scaler"].load_state_dict(first.get("scaler", {}))
    torch.set_rng_state(first["rng"]["torch"])
    training.torch.cuda.set_rng_state(first["rng"]["cuda"])
    log.info(
        "re-split %s from pp x tp = %s to %s",
        path,
        written,
        (config.pipeline_parallel_size, config.tensor_parallel_size),
    )
    progress = first["progress"]
    return int(progress["step"]), int(progress["epoch"]), int(progress["batch_in_epoch"])


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


def _canonical_optimizer_state(
    shards: dict[tuple[int, int], dict[str, Any]],
    builder: Any,
    old_pp: int,
    canonical_model: torch.nn.Module,
) -> dict[str, dict[str, Any]]:
    """Every parameter's optimizer state under its canonical (single-process) name, its TP
    shards merged. Optimizer state follows its parameter (a momentum or Adam moment is
    sharded as the parameter is; a step count is kept)."""
    reference = canonical_model.state_dict()
    maps = {pp: builder._canonical_key_map(pp, old_pp, canonical_model) for pp in range(old_pp)}
    gathered: dict[str, dict[str, list[tuple[int, Any]]]] = {}
    for (pp, tp), state in sorted(shards.items()):
        for local, fields in state["optimizer"].get("state", {}).items():
            name = maps[pp][local]
            for field, value in fields.items():
                gathered.setdefault(name, {}).setdefault(field, []).append((tp, value))
    return {
        name: {
            field: _merge(builder, name, [v for _, v in sorted(values)], reference[name])
            for field, values in fields.items()
        }
        for name, fields in gathered.items()
    }


def resplit(
    shards: dict[tuple[int, int], dict[str, Any]],
    builder: Any,
    written: tuple[int, int],
    pipeline: tuple[int, int],
    tensor: tuple[int, int],
    current: tuple[dict[str, torch.Tensor], dict[str, Any]],
    path: Path,
) -> dict[str, Any]:
    """This rank's model and optimizer state from `shards` ({(pp, tp): state}) written under
    `written` = (old pp, old tp). `pipeline`/`tensor`: this rank's (rank, size); `current`:
    its own full model and optimizer state dicts now (get_state_dict), whose names and shapes
    the result takes, so a layout the builder cannot produce fails loudly instead of loading
    a wrong shard."""
    old_pp, old_tp = written
    (pp_rank, pp_size), (tp_rank, tp_size) = pipeline, tensor
    canonical_model = builder._build_canonical_model()
    model = builder.merge_state_dicts(
        [(pp, tp, state["model"]) for (pp, tp), state in shards.items()],
        pipeline_size=old_pp,
        tensor_size=old_tp,
    )
    optimizer_state = _canonical_optimizer_state(shards, builder, old_pp, canonical_model)
    model_now, optimizer_now = current
    new_map = builder._canonical_key_map(pp_rank, pp_size, canonical_model)
    if set(new_map) != set(model_now):
        raise CheckpointError(
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
    return {"model": local_model, "optimizer": {"state": local_optimizer, "param_groups": groups}}
