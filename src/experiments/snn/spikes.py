"""Spike activity and energy at every evaluation, with SpikingJelly's own instruments only
(docs/spikes.md has what is measured and its settings).

Under `no_grad`, not `inference_mode`: the op counters see nothing under the latter. Each
neuron's output is reduced on the fly (no tensor kept) with operations the counters have no
rule for (count_nonzero, amax, amin, eq), since a reduction by sum would be counted as
accumulates.

Any topology gives the single process's figures for the same weights: data-parallel ranks
measure shares of the slice and counts (never rates) are summed; a pipeline stage counts
the layers it holds; under channel TP what lies between a column-wise split and its
row-wise merge is summed over TP ranks, the rest taken once (the split is read from
SpikingJelly's ChannelShard modules at run time). Rank 0 combines.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from experiments.errors import ConfigError, RunStopped
from experiments.snn.spikes_file import SATURATED, SPIKES_FILE

SHARD_SCOPE = "tensor-parallel shard"  # the counters' scope for work split over TP ranks
# the memory traffic SpikingJelly's energy model prices (its SimpleEnergyReport's sum)
MEMORY_BYTES = (
    "weight_read_bytes",
    "bias_read_bytes",
    "neuron_state_read_bytes",
    "neuron_state_write_bytes",
)


# `auto`: the slice's size (rounded up to what the topology divides). 32, not 64: SpikingJelly's
# op counter costs 0.24 s a measurement on 32 digits images against 0.31 s on 64 (the main job
# measures 4 times), and the main job's firing rate on either is within 2.2 % of the rate on
# 320 images (0.0600 and 0.0575 against 0.0588; energy per image the same to 4 digits).
DEFAULT_IMAGES = 32


@dataclass(frozen=True)
class Settings:
    images: int | None  # the slice's size; 0: off; None: auto (DEFAULT_IMAGES, resolved)
    seed: int
    costs: str
    guard: int | None  # evaluations in a row a layer may stay silent or saturated; None: off

    @property
    def active(self) -> bool:
        return bool(self.images)

    def describe(self) -> str:
        if not self.active:
            return "off (trainer.spikes.images=0)"
        guard = f"guard {self.guard} evaluations" if self.guard else "guard off"
        return (
            f"{self.images} validation images each evaluation (seed {self.seed}), "
            f"SpikingJelly's {self.costs} energy costs, {guard}"
        )


def settings(trainer: dict[str, Any]) -> Settings:
    """`trainer.spikes` as the run uses it (`auto` as None, made a size by `resolved`); its
    keys' types and ranges are their schema's (schemas/trainer.py)."""
    node = trainer["spikes"]
    images = node["images"]
    return Settings(
        images=None if images == "auto" else images,
        seed=node["seed"],
        costs=node["costs"],
        guard=node["guard"],
    )


def resolved(spikes: Settings, dims: Any, batch_size: int) -> Settings:
    """`auto` made a size, and the size checked: every data-parallel rank measures an equal
    share of the slice (FSDP2 and DDP run their forwards in lockstep), in whole batches under
    a pipeline."""
    multiple = dims.data_parallel_size * (batch_size if dims.pipeline_parallel_size > 1 else 1)
    if spikes.images is None:
        return dataclasses.replace(spikes, images=-(-DEFAULT_IMAGES // multiple) * multiple)
    if spikes.images and spikes.images % multiple:
        fits = max(multiple, spikes.images - spikes.images % multiple)
        raise ConfigError(
            "trainer.spikes.images",
            spikes.images,
            f"a multiple of {multiple} (data-parallel size"
            + (" x batch size under PP" if dims.pipeline_parallel_size > 1 else "")
            + f", so each rank measures an equal share), e.g. trainer.spikes.images={fits}",
        )
    return spikes


def cost_config(costs: str) -> Any:
    from spikingjelly.activation_based.op_counter import SimpleEnergyCostConfig

    return getattr(SimpleEnergyCostConfig, costs)()


def slice_indices(size: int, images: int, seed: int) -> list[int]:
    """The slice: `images` validation indices drawn once by `seed` (the same every time)."""
    generator = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(size, generator=generator)[: min(images, size)].tolist())


# --- one rank's counts ------------------------------------------------------------------------


@dataclass
class Layer:
    spikes: int = 0
    steps: int = 0  # neuron-steps: neurons x time steps x images
    fired: torch.Tensor | None = None  # per neuron: fired at least once on the slice
    always: torch.Tensor | None = None  # per neuron: fired at every step of every image
    sharded: bool = False  # holds one TP shard of the layer (summed over TP ranks)


@dataclass
class Counts:
    """One rank's measurement, before any combining."""

    layers: dict[str, Layer] = field(default_factory=dict)
    images: int = 0
    ops: dict[str, int] = field(default_factory=dict)  # mac, ac, synop, memory bytes
    sharded_ops: dict[str, int] = field(default_factory=dict)  # of which under a TP shard


def _reduce(output: Any) -> tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]:
    """A neuron layer's output reduced where it is made, with ops the counters have no rule
    for: spikes, elements, and per neuron (over time and batch) fired-any / fired-always.
    Multi-step outputs are [T, N, ...] (dims 0 and 1), single-step ones [N, ...] (dim 0)."""
    spikes = output if isinstance(output, torch.Tensor) else output[0]
    dims = (0, 1) if spikes.dim() > 2 else (0,)
    return (
        spikes.count_nonzero(),
        spikes.numel(),
        spikes.amax(dims).eq(0),  # never fired (inverted when combined)
        spikes.amin(dims).eq(0),  # missed a step
    )


def spiking_layers(model: torch.nn.Module) -> list[str]:
    from spikingjelly.activation_based.neuron import BaseNode, SimpleBaseNode

    return [n for n, m in model.named_modules() if isinstance(m, (BaseNode, SimpleBaseNode))]


class _ShardRegion:
    """Marks, while a forward runs, the stretch between a column-wise (or head-wise) TP split
    and the row-wise merge that ends it: the neurons called there hold one shard, and the
    counters record the operations there under SHARD_SCOPE too."""

    def __init__(self, model: torch.nn.Module, trackers: list[Any]) -> None:
        self.inside = False
        self.trackers = trackers
        self.handles = []
        for module in model.modules():
            kind = _split_kind(module)
            if kind == "split":
                self.handles.append(module.register_forward_pre_hook(self._enter))
            elif kind == "merge":
                self.handles.append(module.register_forward_hook(self._leave))

    def _enter(self, *_: Any) -> None:
        self.inside = True
        for tracker in self.trackers:
            tracker.parents.add(SHARD_SCOPE)

    def _leave(self, *_: Any) -> None:
        self.inside = False
        for tracker in self.trackers:
            tracker.parents.discard(SHARD_SCOPE)

    def close(self) -> None:
        self._leave()
        for handle in self.handles:
            handle.remove()


def _split_kind(module: torch.nn.Module) -> str | None:
    """SpikingJelly's channel TP modules: a column-wise ChannelShardConv (and the head-wise
    QKV conv of Spikformer) starts a sharded stretch, a row-wise one merges it back."""
    mode = getattr(module, "mode", None)
    name = type(module).__name__
    if name.startswith("ChannelShardConv") and mode in ("colwise", "rowwise"):
        return "split" if mode == "colwise" else "merge"
    if name == "_HeadShardQKVConv1d":
        return "split"
    return None


def measure(
    model: torch.nn.Module,
    batches: list[torch.Tensor],
    forward: Callable[[torch.Tensor], Any],
    spikes: Settings,
    names: Callable[[str], str] = lambda name: name,
    tensor_parallel: bool = False,
) -> Counts:
    """This rank's counts over `batches` (its share of the slice), each batch run through
    `forward` (the loop's own evaluation forward, or a pipeline schedule's step) with
    `model`'s neurons monitored and its operations counted. `names` maps this rank's module
    names to the single-process model's."""
    from spikingjelly.activation_based import functional, monitor
    from spikingjelly.activation_based.neuron import BaseNode, SimpleBaseNode
    from spikingjelly.activation_based.op_counter import SimpleEnergyConfig, SimpleEnergyProfiler

    profiler = SimpleEnergyProfiler(
        config=SimpleEnergyConfig(cost_config=cost_config(spikes.costs))
    )
    profiler.bind_model(model)
    watched = monitor.OutputMonitor(model, (BaseNode, SimpleBaseNode), function_on_output=_reduce)
    region = (
        _ShardRegion(model, [profiler._dispatch_mode.module_tracker]) if tensor_parallel else None
    )
    in_shard: dict[str, bool] = {}
    marks = [
        module.register_forward_pre_hook(
            lambda *_, name=name: in_shard.__setitem__(name, bool(region and region.inside))
        )
        for name, module in model.named_modules()
        if isinstance(module, (BaseNode, SimpleBaseNode))
    ]
    training = model.training
    model.eval()
    counts = Counts()
    try:
        with profiler, torch.no_grad():
            for images in batches:
                forward(images)
                functional.reset_net(model)
                counts.images += int(images.shape[0])
    finally:
        watched.close()
        for handle in marks:
            handle.remove()
        if region is not None:
            region.close()
        model.train(training)
    for name in watched.monitored_layers:
        counts.layers[names(name)] = _layer(watched[name], in_shard.get(name, False))
    counts.ops, counts.sharded_ops = _ops(profiler)
    return counts


def _layer(records: list[Any], sharded: bool) -> Layer:
    layer = Layer(sharded=sharded)
    never = missed = None
    for spikes, elements, never_here, missed_here in records:
        layer.spikes += int(spikes)
        layer.steps += int(elements)
        never = never_here if never is None else never & never_here
        missed = missed_here if missed is None else missed | missed_here
    if never is not None and missed is not None:
        layer.fired, layer.always = ~never, ~missed
    return layer


def _ops(profiler: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(all operations and memory bytes counted on this rank, those under SHARD_SCOPE)."""
    total: dict[str, int] = {}
    sharded: dict[str, int] = {}
    for key, counter in (
        ("mac", profiler.mac_counter),
        ("ac", profiler.ac_counter),
        ("synop", profiler.synop_counter),
    ):
        scopes = counter.get_counts()
        total[key] = int(sum(scopes.get("Global", {}).values()))
        sharded[key] = int(sum(scopes.get(SHARD_SCOPE, {}).values()))
    memory = profiler.memory_counter.get_counts().get("Global", {})
    total["memory_bytes"] = int(sum(memory.get(key, 0) for key in MEMORY_BYTES))
    return total, sharded


# --- combining ranks ------------------------------------------------------------------------


def local_summary(counts: Counts) -> dict[str, Any]:
    """What a rank sends to rank 0 (after its data-parallel peers' counts are reduced in):
    per layer its sums and its silent and saturated neuron counts."""
    layers = {}
    for name, layer in counts.layers.items():
        neurons = int(layer.fired.numel()) if layer.fired is not None else 0
        layers[name] = {
            "spikes": layer.spikes,
            "steps": layer.steps,
            "neurons": neurons,
            "silent": neurons - int(layer.fired.count_nonzero()) if neurons else 0,
            "saturated": int(layer.always.count_nonzero()) if neurons else 0,
            "sharded": layer.sharded,
        }
    return {
        "layers": layers,
        "images": counts.images,
        "ops": counts.ops,
        "sharded_ops": counts.sharded_ops,
    }


def reduce_data_parallel(counts: Counts, group: Any, size: int) -> None:
    """Sum this rank's counts with its data-parallel peers' (same layers, other images), in
    place; a neuron fired if it fired on any peer's images, fired always if on all of them."""
    if size <= 1:
        return
    import torch.distributed as dist

    from experiments import distributed_env

    sums = [v for layer in counts.layers.values() for v in (layer.spikes, layer.steps)]
    sums += [counts.images, *counts.ops.values(), *counts.sharded_ops.values()]
    total = distributed_env.collective_tensor(sums, group, dtype=torch.float64)
    dist.all_reduce(total, group=group)
    values = iter(total.tolist())
    for layer in counts.layers.values():
        layer.spikes, layer.steps = int(next(values)), int(next(values))
    counts.images = int(next(values))
    counts.ops = {k: int(next(values)) for k in counts.ops}
    counts.sharded_ops = {k: int(next(values)) for k in counts.sharded_ops}
    for layer in counts.layers.values():
        if layer.fired is None or layer.always is None:
            continue
        fired = distributed_env.collective_tensor(layer.fired, group, dtype=torch.uint8)
        missed = distributed_env.collective_tensor(~layer.always, group, dtype=torch.uint8)
        dist.all_reduce(fired, op=dist.ReduceOp.MAX, group=group)
        dist.all_reduce(missed, op=dist.ReduceOp.MAX, group=group)
        layer.fired, layer.always = fired.bool().cpu(), ~missed.bool().cpu()


def combine(
    summaries: list[tuple[int, dict[str, Any]]],
    spikes: Settings,
    order: list[str],
    step: int,
    epoch: int | None,
) -> dict[str, Any]:
    """Rank 0's record of one evaluation from each model-parallel position's summary
    ((tp rank, summary), data-parallel peers already reduced in): a layer or an operation
    held in shards is summed over the TP ranks, the rest taken from TP rank 0; pipeline
    stages hold disjoint layers. `order`: the single-process model's layer names."""
    layers: dict[str, dict[str, Any]] = {}
    ops: dict[str, float] = {}
    images = 0
    for tp_rank, summary in summaries:
        images = max(images, summary["images"])
        for name, layer in summary["layers"].items():
            if not layer["sharded"] and tp_rank != 0:
                continue
            into = layers.setdefault(
                name, {"spikes": 0, "steps": 0, "neurons": 0, "silent": 0, "saturated": 0}
            )
            for key in into:
                into[key] += layer[key]
        for key, value in summary["ops"].items():
            shared = value - summary["sharded_ops"].get(key, 0)
            ops[key] = ops.get(key, 0) + summary["sharded_ops"].get(key, 0)
            ops[key] += shared if tp_rank == 0 else 0
    return _record(
        layers,
        ops,
        images,
        spikes,
        order,
        step,
        epoch,
        memory_comparable=not any(tp for tp, _ in summaries),
    )


def _record(
    layers: dict[str, dict[str, Any]],
    ops: dict[str, float],
    images: int,
    spikes: Settings,
    order: list[str],
    step: int,
    epoch: int | None,
    memory_comparable: bool,
) -> dict[str, Any]:
    costs = cost_config(spikes.costs)
    per_image = max(images, 1)
    ordered = [name for name in order if name in layers] + sorted(set(layers) - set(order))
    table = []
    for name in ordered:
        layer = layers[name]
        neurons = max(layer["neurons"], 1)
        table.append(
            {
                "layer": name,
                "firing_rate": layer["spikes"] / max(layer["steps"], 1),
                "silent": layer["silent"] / neurons,
                "saturated": layer["saturated"] / neurons,
                "neurons": layer["neurons"],
            }
        )
    compute_pj = ops.get("mac", 0) * costs.e_mac_pj + ops.get("ac", 0) * costs.e_ac_pj
    memory_pj = ops.get("memory_bytes", 0) * costs.e_memory_pj_per_byte
    total_spikes = sum(layer["spikes"] for layer in layers.values())
    total_steps = sum(layer["steps"] for layer in layers.values())
    return {
        "step": step,
        "epoch": epoch,
        "images": images,
        "firing_rate": total_spikes / max(total_steps, 1),
        "synops_per_image": ops.get("synop", 0) / per_image,
        "acs_per_image": ops.get("ac", 0) / per_image,
        "macs_per_image": ops.get("mac", 0) / per_image,
        # compute energy, as papers give it: MACs x E_MAC + ACs x E_AC (pJ -> mJ)
        "energy_per_image_mj": compute_pj / per_image * 1e-9,
        # with SpikingJelly's memory-traffic term (its counter does not see the weights of a
        # TP-sharded conv: not comparable across topologies with channel TP)
        "energy_with_memory_per_image_mj": (compute_pj + memory_pj) / per_image * 1e-9
        if memory_comparable
        else None,
        "layers": table,
    }


METRICS = ("firing_rate", "synops_per_image", "energy_per_image_mj")


def constants(spikes: Settings) -> dict[str, Any]:
    """What spikes.json records of how the figures were made."""
    return {
        "energy_model": "SpikingJelly op_counter.SimpleEnergyProfiler (simple_horowitz_step_"
        "composite_v1, 45 nm)",
        "costs": spikes.costs,
        "cost_constants_pj": dataclasses.asdict(cost_config(spikes.costs)),
        "energy_per_image_mj": "MACs x e_mac_pj + ACs x e_ac_pj, per image, in mJ",
        "slice": {"images": spikes.images, "seed": spikes.seed},
        "saturated_rate": SATURATED,
    }


# --- the run's record and guard -----------------------------------------------------------


class Guard:
    """A layer silent (rate 0) or saturated (rate >= SATURATED) for `evaluations` evaluations
    in a row stops the run: one line naming the layer, its rate and the evaluation."""

    def __init__(self, evaluations: int | None) -> None:
        self.evaluations = evaluations
        self.streaks: dict[str, int] = {}
        self.count = 0

    def replay(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            self.after(record, raise_error=False)

    def after(self, record: dict[str, Any], raise_error: bool = True) -> str | None:
        self.count += 1
        if self.evaluations is None:
            return None
        for layer in record["layers"]:
            rate = layer["firing_rate"]
            stuck = rate == 0 or rate >= SATURATED
            self.streaks[layer["layer"]] = self.streaks.get(layer["layer"], 0) + 1 if stuck else 0
            if stuck and self.streaks[layer["layer"]] >= self.evaluations:
                state = "silent" if rate == 0 else "saturated"
                why = (
                    f"layer {layer['layer']} {state} (firing rate {rate:.4f}) for "
                    f"{self.evaluations} evaluation(s) in a row, the last at step "
                    f"{record['step']} (evaluation {self.count}); trainer.spikes.guard=null "
                    "turns the guard off"
                )
                if raise_error:
                    raise DeadLayer(why)
                return why
        return None


class DeadLayer(RunStopped):
    """The health guard stopped the run (recorded `failed`, in one line)."""


def write(run_dir: Path, spikes: Settings, records: list[dict[str, Any]]) -> Path:
    from experiments.run.record import write_json_atomic

    path = run_dir / SPIKES_FILE
    write_json_atomic(path, {**constants(spikes), "evaluations": records})
    return path


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The loggers' scalars of one evaluation: the network's, and each layer's rate."""
    values = {f"spikes/{key}": float(record[key]) for key in METRICS}
    for layer in record["layers"]:
        values[f"spikes/firing_rate/{layer['layer']}"] = float(layer["firing_rate"])
    return {k: v for k, v in values.items() if math.isfinite(v)}


def batches_of(dataset: Any, indices: list[int], batch: int) -> Iterator[torch.Tensor]:
    """The slice's images, `batch` at a time, as the validation loader would give them."""
    from torch.utils.data import default_collate

    for start in range(0, len(indices), batch):
        yield default_collate([dataset[i] for i in indices[start : start + batch]])[0]
