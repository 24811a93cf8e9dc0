"""Every option of every group composes with every other; valid ones produce a plan."""

from __future__ import annotations

import csv
import functools
import itertools
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from spikingjelly.activation_based.distributed.vision import ModelConfig, TrainingConfig
from spikingjelly.activation_based.model.sew_resnet import SEWResNet34Config
from spikingjelly.activation_based.model.spikformer import SpikformerCIFAR10Config, SpikformerConfig

from experiments.errors import ConfigError
from experiments.snn.models.sew_resnet import SEWResNetConfig
from experiments.snn.models.spikformer import SpikformerTinyConfig

from .conftest import compose_run, plan_for


def options(group: str) -> list[str]:
    folder = resources.files("experiments.conf") / group
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


MODELS = options("model")
TOPOLOGIES = options("topology")
LAUNCHERS = options("launcher")
DATA = options("data")
# The papers' architectures (docs/models.md) are pinned on one data option each: their verdicts
# follow their capabilities (TP heads, stages, input), which the data options do not change; the
# whole product would plan 60 more combinations a model (~8 s of CPU). Options of the same config
# class as one pinned here plan alike at these topologies' sizes; tests/test_models.py plans
# each of them (parameter counts) and their own refusals (TP over 12 heads, PP over 2 blocks).
PAPER_MODELS = ("sew_dvs128_gesture", "spikformer_2_256", "spikformer_4_384")
LIKE_A_PINNED_ONE = {
    "sew_cifar10_dvs": "sew_dvs128_gesture",
    "spikformer_8_384": "spikformer_4_384",
    "spikformer_8_512": "spikformer_4_384",
    "spikformer_8_768": "spikformer_4_384",
}
MATRIX_MODELS = [model for model in MODELS if model not in LIKE_A_PINNED_ONE]
# The input size a model needs on the matrix's data options.
MODEL_OVERRIDES = {
    "spikformer_cifar10": ["data.image_size=32"],
    "sew_dvs128_gesture": ["data.image_size=128"],
}


def matrix_data(model: str) -> list[str]:
    return ["synthetic"] if model in PAPER_MODELS else MATRIX_DATA


def model_overrides(model: str) -> list[str]:
    return MODEL_OVERRIDES.get(model, [])


def test_groups_hold_what_the_product_card_names() -> None:
    assert {
        "sew_resnet18",
        "sew_resnet34",
        "sew_resnet50",
        "sew_resnet101",
        "sew_resnet152",
        "spikformer",
        "spikformer_tiny",
        "spikformer_cifar10",
        "spiking_resnet18",
        "spiking_resnet34",
        "spiking_resnet50",
        "spiking_vgg11_bn",
        "spiking_vgg16_bn",
        "zoo_sew_resnet18",
        "zoo_sew_resnet152",
        *PAPER_MODELS,
        *LIKE_A_PINNED_ONE,
        "dcgan",
        "lsgan",
        "ggan",
    } <= set(MODELS)
    assert TOPOLOGIES == ["channel_tp", "ddp", "fsdp2", "pp", "single"]
    assert LAUNCHERS == ["local", "slurm", "torchrun"]
    assert DATA == [
        "cifar10",
        "cifar100",
        "cifar10_dvs",
        "digits",
        "digits_sequence",
        "dvs128_gesture",
        "imagefolder",
        "n_caltech101",
        "n_mnist",
        "synthetic",
    ]


@pytest.mark.parametrize(
    ("model", "cls"),
    [
        ("sew_resnet34", SEWResNet34Config),
        ("spikformer", SpikformerConfig),
        ("spikformer_cifar10", SpikformerCIFAR10Config),
        ("spikformer_tiny", SpikformerTinyConfig),
        ("sew_resnet18", SEWResNetConfig),
        ("sew_resnet152", SEWResNetConfig),
    ],
)
def test_models_instantiate_spikingjellys_own_config_classes(model: str, cls: type) -> None:
    extra = ["data.image_size=32"] if model == "spikformer_cifar10" else []
    plan = plan_for([f"model={model}", *extra])
    assert type(plan.model_config) is cls
    assert isinstance(plan.model_config, ModelConfig)
    assert isinstance(plan.training_config, TrainingConfig)
    # The library config round-trips through SpikingJelly's own serialisation for its classes.
    if cls.__module__.startswith("spikingjelly"):
        assert TrainingConfig.from_dict(plan.training_config.as_dict()) == plan.training_config


@pytest.mark.parametrize("connection", ["ADD", "AND", "IAND"])
@pytest.mark.parametrize("depth", [18, 50, 101, 152])
def test_every_zoo_depth_with_every_connection(depth: int, connection: str) -> None:
    plan = plan_for([f"model=sew_resnet{depth}", f"model.connection={connection}"])
    assert plan.model_config.depth == depth
    assert plan.model_config.connection == connection
    expected = {18: 11.18e6, 50: 23.5e6, 101: 42.5e6, 152: 58.1e6}[depth]
    assert plan.parameters == pytest.approx(expected, rel=0.02)


def _launcher_overrides(launcher: str, world: int) -> list[str]:
    if launcher == "torchrun":
        return [f"launcher.nproc_per_node={world}"]
    if launcher == "slurm":
        return [f"launcher.tasks_per_node={world}"]
    return []


MATRIX_FILE = Path(__file__).parent / "data" / "config_matrix.csv"
# The papers' datasets (a data.root of files on disk) have a matrix of their own
# (config_matrix_datasets.csv): their verdicts turn on the model (channels, input size, classes),
# not on the topology or launcher, and a plan costs ~0.1-0.5 s, so the full product of six more
# options (~2,000 plans) would cost minutes of suite time.
DATASETS = ["cifar10", "cifar100", "cifar10_dvs", "dvs128_gesture", "n_caltech101", "n_mnist"]
MATRIX_DATA = [option for option in DATA if option not in DATASETS]


def _matrix() -> dict[tuple[str, str, str, str], str]:
    lines = [line for line in MATRIX_FILE.read_text().splitlines() if not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    return {(r["model"], r["topology"], r["launcher"], r["data"]): r["verdict"] for r in rows}


MATRIX = _matrix()


def test_the_matrix_pins_every_combination_of_the_groups() -> None:
    assert set(MATRIX) == {
        (model, topology, launcher, data)
        for model, topology, launcher in itertools.product(MATRIX_MODELS, TOPOLOGIES, LAUNCHERS)
        for data in matrix_data(model)
    }
    assert set(DATASET_MATRIX) == set(itertools.product(DATASET_MODELS, DATASETS))


@pytest.mark.parametrize(("model", "topology", "launcher", "data"), sorted(MATRIX))
def test_every_combination_plans_or_is_refused_naming_the_pinned_key(
    model: str, topology: str, launcher: str, data: str, request: pytest.FixtureRequest
) -> None:
    """Each combination's verdict is pinned in tests/data/config_matrix.csv: it plans, or it
    is refused with a ConfigError naming that key (never a library traceback). A valid
    combination that starts being refused fails, and so does every GAN combination when
    MMGen is missing (refused on `model`). World size 4 where the launcher can give it."""
    world = 1 if launcher == "local" or topology == "single" else 4
    overrides = [
        f"model={model}",
        f"topology={topology}",
        f"launcher={launcher}",
        f"data={data}",
        *_launcher_overrides(launcher, world),
    ]
    if data == "imagefolder":
        folder = request.getfixturevalue("imagefolder")
        overrides += [f"data.root={folder}", "data.num_classes=10"]
    overrides += model_overrides(model)
    expected = MATRIX[(model, topology, launcher, data)]
    plan = _plan_or_pinned_refusal(overrides, expected)
    if plan is None:
        return
    assert plan.dims.world_size == world
    assert plan.engine == ("mmgen" if _family(model) == "gan" else "spikingjelly")
    # The mesh the topology's yaml asks for at this world size, in the plan and (SNN) in
    # SpikingJelly's TrainingConfig, which builds the device mesh from it.
    shape, data_parallel = MESH[topology] if world > 1 else ((1, 1, 1), None)
    assert plan.dims.mesh_shape == shape
    assert plan.as_dict()["mesh"]["shape"] == list(shape)
    if data_parallel is not None:
        assert plan.dims.data_parallel == data_parallel
    if _family(model) != "gan":
        dp, pp, tp = shape
        assert (
            plan.training_config.pipeline_parallel_size,
            plan.training_config.tensor_parallel_size,
        ) == (pp, tp)
        assert plan.global_batch == plan.training_config.batch_size * dp
        # the spike and energy measurement is planned for every SNN model, an equal share a rank
        assert plan.spikes.active and plan.spikes.images >= 32
        assert plan.spikes.images % dp == 0


DATASET_MATRIX_FILE = Path(__file__).parent / "data" / "config_matrix_datasets.csv"
# One model of each kind of config: ours (SEW-ResNet, Spikformer-Ti), SpikingJelly's fixed-size
# CIFAR Spikformer, a zoo factory, a GAN.
DATASET_MODELS = [
    "sew_resnet18",
    "spikformer_tiny",
    "spikformer_cifar10",
    "zoo_sew_resnet18",
    "dcgan",
]


def _dataset_matrix() -> dict[tuple[str, str], str]:
    text = DATASET_MATRIX_FILE.read_text().splitlines()
    rows = csv.DictReader([line for line in text if not line.startswith("#")])
    return {(r["model"], r["data"]): r["verdict"] for r in rows}


DATASET_MATRIX = _dataset_matrix()


@pytest.mark.parametrize(("model", "data"), sorted(DATASET_MATRIX))
def test_each_dataset_plans_or_is_refused_naming_the_pinned_key(
    model: str, data: str, dataset_files: Any
) -> None:
    """tests/data/config_matrix_datasets.csv: each model kind on each of the papers' datasets
    (tiny real files, topology=single, launcher=local) plans, or is refused on the pinned key;
    what plans reads the files' own sample counts for its schedule."""
    from .support.datasets import skip_cifar_md5

    images = data in ("cifar10", "cifar100")
    root = dataset_files.cifar(data) if images else dataset_files.events(data)
    extra = ["data.train_ratio=0.5"] if data == "n_caltech101" else []
    with skip_cifar_md5():
        plan = _plan_or_pinned_refusal(
            [f"model={model}", f"data={data}", f"data.root={root}", *extra],
            DATASET_MATRIX[(model, data)],
        )
    if plan is not None:
        assert plan.training_config.dataset_kwargs["root"] == str(root)
        assert plan.training_config.input_layout == ("NCHW" if images else "NTCHW")


# (dp, pp, tp) and the data-parallel kind of each topology at world size 4 (conf/topology/).
MESH = {
    "single": ((1, 1, 1), None),
    "ddp": ((4, 1, 1), "ddp"),
    "fsdp2": ((4, 1, 1), "fsdp2"),
    "channel_tp": ((2, 1, 2), "ddp"),
    "pp": ((2, 2, 1), "ddp"),
}


def _plan_or_pinned_refusal(overrides: list[str], expected: str) -> Any:
    """The plan when the matrix pins `plans`; None when it is refused, as pinned, by a
    ConfigError naming that key (one line); anything else fails the test."""
    try:
        plan = plan_for(overrides)
    except ConfigError as error:
        assert str(error).startswith(f"invalid config: {error.key}=")
        assert error.key == expected, f"refused on {error.key}, pinned {expected}: {error}"
        return None
    assert expected == "plans", f"plans, but the matrix pins a refusal on {expected}"
    return plan


@functools.cache
def _family(model: str) -> str | None:
    return compose_run([f"model={model}"]).model.get("family")


VALID = [
    ("sew_resnet18", "single", "local", []),
    ("sew_resnet34", "ddp", "torchrun", []),
    ("sew_resnet34", "fsdp2", "torchrun", []),
    ("sew_resnet34", "channel_tp", "torchrun", []),
    ("sew_resnet34", "pp", "torchrun", []),
    (
        "sew_resnet18",
        "fsdp2",
        "torchrun",
        ["launcher.nproc_per_node=4", "topology.tensor_parallel_size=2"],
    ),
    (
        "sew_resnet18",
        "ddp",
        "torchrun",
        [
            "launcher.nproc_per_node=4",
            "topology.pipeline_parallel_size=2",
            "topology.pipeline_microbatches=2",
        ],
    ),
    ("spikformer", "channel_tp", "torchrun", []),
    ("spikformer_tiny", "pp", "torchrun", []),
    ("spikformer_cifar10", "ddp", "slurm", ["data.image_size=32", "launcher.tasks_per_node=2"]),
    (
        "sew_resnet152",
        "fsdp2",
        "slurm",
        ["launcher.nodes=2", "launcher.tasks_per_node=4", "launcher.gpus_per_node=4"],
    ),
]


@pytest.mark.parametrize(("model", "topology", "launcher", "extra"), VALID)
def test_known_good_topologies_plan(
    model: str, topology: str, launcher: str, extra: list[str]
) -> None:
    plan = plan_for([f"model={model}", f"topology={topology}", f"launcher={launcher}", *extra])
    dims = plan.dims
    dp, pp, tp = dims.mesh_shape
    assert dp * pp * tp == dims.world_size
    assert plan.training_config.tensor_parallel_size == tp
    assert plan.training_config.pipeline_parallel_size == pp
    assert plan.global_batch == plan.training_config.batch_size * dp


def test_gpu_slurm_run_plans_spikingjellys_trainer_with_nccl() -> None:
    plan = plan_for(
        [
            "model=sew_resnet34",
            "topology=fsdp2",
            "launcher=slurm",
            "launcher.nodes=2",
            "launcher.tasks_per_node=4",
            "launcher.gpus_per_node=4",
            "trainer.precision=bf16",
        ]
    )
    assert (plan.engine, plan.device, plan.backend) == ("spikingjelly", "cuda", "nccl")
    assert plan.dims.world_size == 8
    assert plan.training_config.precision.mode == "bf16"


TRAINER_FILE = Path(__file__).parent / "data" / "config_matrix_trainers.csv"
# Of the papers' architectures, one a config class: the trainers treat the others alike.
TRAINER_MODELS = [model for model in MATRIX_MODELS if model != "spikformer_2_256"]
TRAINERS = {"classify": ["trainer=classify"], "spikingjelly": ["trainer.engine=spikingjelly"]}


def _trainer_matrix() -> dict[tuple[str, str, str], tuple[str, str]]:
    lines = [line for line in TRAINER_FILE.read_text().splitlines() if not line.startswith("#")]
    return {
        (r["trainer"], r["model"], r["topology"]): (r["verdict"], r["engine"])
        for r in csv.DictReader(lines)
    }


TRAINER_MATRIX = _trainer_matrix()


def test_the_trainer_matrix_pins_every_trainer_model_and_topology() -> None:
    assert set(TRAINER_MATRIX) == set(itertools.product(TRAINERS, TRAINER_MODELS, TOPOLOGIES))


@pytest.mark.parametrize(("trainer", "model", "topology"), sorted(TRAINER_MATRIX))
def test_every_trainer_plans_or_is_refused_naming_the_pinned_key(
    trainer: str, model: str, topology: str
) -> None:
    """The trainer axis of the matrix (tests/data/config_matrix_trainers.csv): the classic
    Trainer and SpikingJelly's own loop, over every model and topology under torchrun. What
    plans gets the pinned engine and the topology's mesh; the rest is refused on the key."""
    world = 1 if topology == "single" else 4
    overrides = [
        f"model={model}",
        f"topology={topology}",
        "launcher=torchrun",
        *_launcher_overrides("torchrun", world),
        *TRAINERS[trainer],
        *model_overrides(model),
    ]
    expected, engine = TRAINER_MATRIX[(trainer, model, topology)]
    plan = _plan_or_pinned_refusal(overrides, expected)
    if plan is None:
        return
    assert (plan.engine, plan.device) == (engine, "cpu")
    shape = MESH[topology][0] if world > 1 else (1, 1, 1)
    assert plan.dims.world_size == world and plan.dims.mesh_shape == shape
