"""SpikingJelly's rules between its speed settings and the topology, checked before launch.

`TrainingConfig.__post_init__` (spikingjelly 2.0.0) raises only the first rule broken, and
`train_classification` checks a few more only once its ranks run; here each is one line
naming our keys (quoting SpikingJelly's message) before any process starts.
tests/test_sj_rules.py compares every verdict with SpikingJelly's own over the whole
combination matrix, so a rule it adds or drops fails that test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BUDGETS = ("speed", "balanced", "memory")


@dataclass(frozen=True)
class Setting:
    """The fields SpikingJelly's rules read, under our keys' values."""

    step_mode: str  # model.step_mode
    pipeline: int  # topology.pipeline_parallel_size
    tensor: int  # topology.tensor_parallel_size
    data_parallel: str  # topology.data_parallel
    microbatches: int  # topology.pipeline_microbatches
    batch_size: int  # trainer.batch_size (per rank)
    precision: str  # trainer.precision
    neuron_storage: str | None  # trainer.neuron_storage (explicit neuron precision)
    execution_mode: str  # trainer.execution_mode
    memopt_level: int  # trainer.memopt_level
    memopt_budget: str  # trainer.memopt_checkpoint_budget


@dataclass(frozen=True)
class Broken:
    key: str
    value: Any
    expected: str


# (keys named, condition, what to do, SpikingJelly's message) in TrainingConfig's order
RULES: tuple[tuple[tuple[str, ...], Any, str, str], ...] = (
    (("trainer.batch_size", "topology.pipeline_microbatches"),
     lambda s: s.batch_size % s.microbatches != 0,
     "a per-rank batch divisible by the micro-batches",
     "batch_size must be divisible by pipeline_microbatches."),
    (("trainer.precision", "topology.pipeline_parallel_size"),
     lambda s: s.pipeline > 1 and s.precision == "fp16",
     "fp32 or bf16 under a pipeline",
     "Vision PP currently supports fp32 and bf16."),
    (("trainer.precision", "topology"),
     lambda s: (s.precision == "fp8" or s.neuron_storage is not None)
     and (s.data_parallel != "ddp" or s.tensor != 1 or s.pipeline != 1),
     "fp8 and explicit neuron precision with topology=ddp only (no TP, no PP)",
     "Vision FP8 or explicit neuron precision requires DDP with TP=1 and PP=1."),
    (("model.step_mode", "topology.pipeline_parallel_size"),
     lambda s: s.step_mode == "s" and s.pipeline > 1,
     "model.step_mode=m under a pipeline",
     "Vision PP currently requires step_mode='m'."),
    (("trainer.memopt_level",),
     lambda s: not 0 <= s.memopt_level <= 4,
     "0 to 4",
     "memopt_level must lie in [0, 4]."),
    (("trainer.execution_mode", "topology.data_parallel"),
     lambda s: s.execution_mode == "cuda_graph" and s.data_parallel == "fsdp2",
     "eager or compile with fsdp2 (a CUDA graph with topology=ddp or single)",
     "CUDA Graph does not support Vision FSDP2 training."),
    (("trainer.execution_mode", "topology"),
     lambda s: s.execution_mode == "cuda_graph" and (s.tensor != 1 or s.pipeline != 1),
     "eager or compile with TP or PP",
     "Vision CUDA Graph requires single-rank model execution."),
    (("trainer.execution_mode", "trainer.memopt_level"),
     lambda s: s.execution_mode == "cuda_graph" and s.memopt_level != 0,
     "memopt_level=0 with a CUDA graph",
     "CUDA Graph does not support Vision memopt training."),
    (("trainer.execution_mode", "trainer.precision"),
     lambda s: s.execution_mode == "cuda_graph"
     and (s.precision == "fp8" or s.neuron_storage is not None),
     "fp32, bf16 or fp16 with a CUDA graph",
     "CUDA Graph does not support Vision FP8 or explicit neuron precision."),
    (("trainer.memopt_checkpoint_budget",),
     lambda s: s.memopt_budget not in BUDGETS,
     "one of " + ", ".join(BUDGETS),
     "memopt_checkpoint_budget must be 'speed', 'balanced', or 'memory'."),
    (("model.step_mode", "trainer.memopt_level"),
     lambda s: s.step_mode == "s" and s.memopt_level != 0,
     "model.step_mode=m with memopt (or memopt_level=0)",
     "Vision memopt currently requires step_mode='m'."),
)  # fmt: skip


def value_of(setting: Setting, key: str) -> Any:
    field = {
        "trainer.batch_size": "batch_size",
        "topology.pipeline_microbatches": "microbatches",
        "trainer.precision": "precision",
        "topology.pipeline_parallel_size": "pipeline",
        "topology.data_parallel": "data_parallel",
        "model.step_mode": "step_mode",
        "trainer.memopt_level": "memopt_level",
        "trainer.execution_mode": "execution_mode",
        "trainer.memopt_checkpoint_budget": "memopt_budget",
    }.get(key)
    if field is None:  # "topology": the layout as a whole
        return f"{setting.data_parallel}, tp={setting.tensor}, pp={setting.pipeline}"
    return getattr(setting, field)


def broken(setting: Setting) -> list[Broken]:
    """Every rule the setting breaks, in SpikingJelly's order (it reports the first)."""
    found = []
    for keys, condition, fix, said in RULES:
        if condition(setting):
            others = ", ".join(f"{k}={value_of(setting, k)!r}" for k in keys[1:])
            found.append(
                Broken(
                    keys[0],
                    value_of(setting, keys[0]),
                    f"{fix}" + (f" (with {others})" if others else "")
                    + f"; SpikingJelly: {said}",
                )
            )  # fmt: skip
    return found
