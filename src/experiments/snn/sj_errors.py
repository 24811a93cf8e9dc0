"""SpikingJelly's TrainingConfig errors under our keys.

The plan builds SpikingJelly's own TrainingConfig before launch (snn/plan.py), and its
`__post_init__` checks SpikingJelly's rules between its speed settings and the topology: it
raises the first one broken, in its words, naming its fields. Here that message gets the key
of ours to change and what would be valid, in one line; the rule itself is SpikingJelly's
alone. tests/test_sj_errors.py makes SpikingJelly raise each of its messages over a whole
combination matrix and checks that every one is mapped, so a rule it adds or rewords fails
there instead of reaching users as an unmapped line.

Not here: what SpikingJelly checks only once its ranks run (snn/trainer.py: a CUDA graph
over several ranks, `check_cuda_graph`; gradient accumulation's limits,
`check_accumulation`), which planning must refuse itself.
"""

from __future__ import annotations

from typing import Any

from experiments.errors import ConfigError

# SpikingJelly's message -> (our keys, the one to change first; what would be valid)
BLAME: dict[str, tuple[tuple[str, ...], str]] = {
    "batch_size must be divisible by pipeline_microbatches.": (
        ("trainer.batch_size", "topology.pipeline_microbatches"),
        "a per-rank batch divisible by the micro-batches",
    ),
    "Vision PP currently supports fp32 and bf16.": (
        ("trainer.precision", "topology.pipeline_parallel_size"),
        "fp32 or bf16 under a pipeline",
    ),
    "Vision FP8 or explicit neuron precision requires DDP with TP=1 and PP=1.": (
        ("trainer.precision", "topology"),
        "fp8 and explicit neuron precision with topology=ddp only (no TP, no PP)",
    ),
    "Vision PP currently requires step_mode='m'.": (
        ("model.step_mode", "topology.pipeline_parallel_size"),
        "model.step_mode=m under a pipeline",
    ),
    "memopt_level must lie in [0, 4].": (("trainer.memopt_level",), "0 to 4"),
    "CUDA Graph does not support Vision FSDP2 training.": (
        ("trainer.execution_mode", "topology.data_parallel"),
        "eager or compile with fsdp2 (a CUDA graph with topology=ddp or single)",
    ),
    "Vision CUDA Graph requires single-rank model execution.": (
        ("trainer.execution_mode", "topology"),
        "eager or compile with TP or PP",
    ),
    "CUDA Graph does not support Vision memopt training.": (
        ("trainer.execution_mode", "trainer.memopt_level"),
        "memopt_level=0 with a CUDA graph",
    ),
    "CUDA Graph does not support Vision FP8 or explicit neuron precision.": (
        ("trainer.execution_mode", "trainer.precision"),
        "fp32, bf16 or fp16 with a CUDA graph",
    ),
    "memopt_checkpoint_budget must be 'speed', 'balanced', or 'memory'.": (
        ("trainer.memopt_checkpoint_budget",),
        "one of speed, balanced, memory",
    ),
    "Vision memopt currently requires step_mode='m'.": (
        ("model.step_mode", "trainer.memopt_level"),
        "model.step_mode=m with memopt (or memopt_level=0)",
    ),
}


def refusal(error: Exception, values: dict[str, Any]) -> ConfigError:
    """SpikingJelly's `error` as a ConfigError naming our key. `values`: our keys' values as
    SpikingJelly got them ("topology": the layout in words; "trainer": the layout and the
    precision, for a message not in BLAME, shown as SpikingJelly said it)."""
    said = str(error)
    if said not in BLAME:
        return ConfigError(
            "trainer", values["trainer"], f"SpikingJelly's TrainingConfig rejects it: {said}"
        )
    keys, valid = BLAME[said]
    others = ", ".join(f"{key}={values[key]!r}" for key in keys[1:])
    with_others = f" (with {others})" if others else ""
    return ConfigError(keys[0], values[keys[0]], f"{valid}{with_others}; SpikingJelly: {said}")
