"""SpikingJelly's TrainingConfig errors under our keys (snn/sj_errors.py): SpikingJelly's own
TrainingConfig built over the whole combination matrix of its speed settings and the topology.
Every message it raises must be mapped to a key of ours, and every mapping must still be a
message it raises: a rule it adds, drops or rewords fails here."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from spikingjelly.activation_based.precision import PrecisionConfig

from experiments.errors import ConfigError
from experiments.snn import sj_errors

from .conftest import plan_for

AXES = {
    "step_mode": ("s", "m"),
    "pipeline": (1, 2),
    "tensor": (1, 2),
    "data_parallel": ("ddp", "fsdp2"),
    "microbatches": (1, 3),
    "precision": ("fp32", "fp16", "bf16", "fp8"),
    "neuron_storage": (None, "bf16"),
    "execution_mode": ("eager", "compile", "cuda_graph"),
    "memopt_level": (0, 2, 5),
    "memopt_budget": ("memory", "speed", "fastest"),
}


def _library_error(base, setting: dict) -> str | None:
    """SpikingJelly's message for the setting, or None when its TrainingConfig accepts it."""
    try:
        dataclasses.replace(
            base,
            model=dataclasses.replace(base.model, step_mode=setting["step_mode"]),
            pipeline_parallel_size=setting["pipeline"],
            tensor_parallel_size=setting["tensor"],
            data_parallel=setting["data_parallel"],
            pipeline_microbatches=setting["microbatches"],
            batch_size=4,
            precision=PrecisionConfig(
                mode=setting["precision"], neuron_storage=setting["neuron_storage"]
            ),
            execution_mode=setting["execution_mode"],
            memopt_level=setting["memopt_level"],
            memopt_checkpoint_budget=setting["memopt_budget"],
        )
    except ValueError as error:
        return str(error)
    return None


def test_every_message_spikingjelly_raises_over_the_whole_matrix_is_mapped() -> None:
    base = plan_for(["experiment=digits_sew_resnet18"]).training_config
    raised: set[str] = set()
    compared = 0
    for values in itertools.product(*AXES.values()):
        said = _library_error(base, dict(zip(AXES, values, strict=True)))
        if said is not None:
            assert said in sj_errors.BLAME, said
            raised.add(said)
        compared += 1
    assert compared == 2 * 2 * 2 * 2 * 2 * 4 * 2 * 3 * 3 * 3
    assert raised == set(sj_errors.BLAME)  # no mapping of a message SpikingJelly dropped


ONE_GPU = ["launcher=slurm", "launcher.gpus_per_node=1", "launcher.tasks_per_node=1"]
GPUS = ["launcher=slurm", "launcher.gpus_per_node=2", "launcher.tasks_per_node=2"]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            [*ONE_GPU, "trainer.execution_mode=cuda_graph", "trainer.memopt_level=1"],
            "trainer.execution_mode='cuda_graph': memopt_level=0 with a CUDA graph",
        ),
        (
            [*GPUS, "topology=pp", "trainer.precision=fp16"],
            "trainer.precision='fp16': fp32 or bf16 under a pipeline",
        ),
        (
            [*GPUS, "topology=fsdp2", "trainer.precision=fp8"],
            "trainer.precision='fp8': fp8 and explicit neuron precision with topology=ddp only",
        ),
    ],
)
def test_a_broken_rule_is_one_line_naming_our_keys_before_launch(
    overrides: list[str], named: str
) -> None:
    """On the GPUs a Slurm job asks for (the plan is CUDA's, wherever it is made)."""
    with pytest.raises(ConfigError) as refused:
        plan_for(["experiment=digits_sew_resnet18", *overrides])
    assert named in str(refused.value) and "SpikingJelly: " in str(refused.value), refused.value
