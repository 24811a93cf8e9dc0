"""Validation messages are part of the interface: one line naming key, bad value, a valid choice."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from experiments.errors import ConfigError

from .conftest import plan_for, run_cli_in_process

TORCHRUN2 = ["launcher=torchrun", "launcher.nproc_per_node=2"]
# Config groups: an error on a group (e.g. topology) names what the choice amounts to
# ("tp=2 x pp=1"), not the option's name.
GROUPS = {"model", "data", "topology", "launcher", "optimizer", "trainer"}

# (overrides, key named in the message, a fragment of what would be valid)
INVALID = [
    (["seed=-1"], "seed", "integer >= 0"),
    (["dry_run=maybe"], "dry_run", "one of"),
    (["resume=/no/such/checkpoint"], "resume", "auto, null"),
    (["trainer.epochs=0"], "trainer.epochs", ">= 1"),
    (["trainer.epochs=abc"], "trainer.epochs", "integer"),
    (["trainer.batch_size=0"], "trainer.batch_size", ">= 1"),
    (["trainer.max_steps=0"], "trainer.max_steps", ">= 1"),
    (["trainer.workers=-2"], "trainer.workers", ">= 0"),
    (["trainer.checkpoint_interval=-5"], "trainer.checkpoint_interval", ">= 0"),
    (["trainer.engine=tpu"], "trainer.engine", "auto, spikingjelly"),
    (["trainer.engine=cpu"], "trainer.engine", "our CPU engine is gone"),
    (["trainer.precision=bf16"], "trainer.precision", "needs CUDA"),
    (["trainer.precision=fp4"], "trainer.precision", "fp32"),
    (["trainer.execution_mode=cuda_graph"], "trainer.execution_mode", "needs CUDA"),
    (["trainer.memopt_level=2"], "trainer.memopt_level", "needs CUDA"),
    (["trainer.memopt_level=9"], "trainer.memopt_level", "from 0 to 4"),
    (["trainer.profile_steps=-1"], "trainer.profile_steps", ">= 0"),
    (["trainer.scheduler=torch.optim.AdamW"], "trainer.scheduler", "lr_scheduler"),
    (["optimizer.lr=0"], "optimizer.lr", "> 0"),
    (["optimizer.lr=-1e-3"], "optimizer.lr", "> 0"),
    (["optimizer.name=torch.optim.Nope"], "optimizer.name", "cannot import"),
    (["optimizer.name=torch.nn.Linear"], "optimizer.name", "torch.optim.Optimizer"),
    (["optimizer.weight_decay=-0.1"], "optimizer.weight_decay", ">= 0"),
    (["model.time_steps=0"], "model.time_steps", "an integer >= 1"),
    (["model.connection=XOR"], "model.connection", "connection"),
    (["model.tau=0.5"], "model.tau", "tau"),
    (["+model.width=3"], "model.width", "not a field"),
    (["model.num_classes=5"], "model.num_classes", "10 classes"),
    (["model.image_size=32"], "model.image_size", "data.image_size=16"),
    (["data.image_size=0"], "data.image_size", ">= 1"),
    (["data.val_size=5000"], "data.val_size", "1796"),
    (["data.num_classes=7"], "data.num_classes", "10 classes"),
    (["+data.colour=true"], "data.colour", "valid keys"),
    (["data=imagefolder"], "data.root", "must be set"),
    (["data=imagefolder", "data.root=/no/such/dataset"], "data.root", "train/<class>"),
    (["model=spikformer_cifar10"], "data.image_size", "32"),
    (["model=spikformer", "data.image_size=24"], "data.image_size", "multiple of 16"),
    (["topology=single", *TORCHRUN2], "topology", "use topology=ddp"),
    (["topology=channel_tp"], "topology", "not divisible by TP x PP"),
    (
        [
            "topology=ddp",
            "launcher=torchrun",
            "launcher.nproc_per_node=3",
            "topology.tensor_parallel_size=2",
        ],
        "topology",
        "not divisible",
    ),
    (
        [
            "topology=channel_tp",
            "launcher=torchrun",
            "launcher.nproc_per_node=3",
            "topology.tensor_parallel_size=3",
        ],
        "topology.tensor_parallel_size",
        "valid sizes: 1, 2, 4, 8",
    ),
    (
        [
            "model=sew_resnet34",
            "topology=pp",
            "launcher=torchrun",
            "launcher.nproc_per_node=3",
            "topology.pipeline_parallel_size=3",
        ],
        "topology.pipeline_parallel_size",
        "valid sizes: 1, 2, 4",
    ),
    (
        [
            "model=spikformer_tiny",
            "topology=pp",
            "launcher=torchrun",
            "launcher.nproc_per_node=4",
            "topology.pipeline_parallel_size=4",
        ],
        "topology.pipeline_parallel_size",
        "valid sizes: 1, 2",
    ),
    (
        [
            "model=spikformer",
            "topology=channel_tp",
            "launcher=torchrun",
            "launcher.nproc_per_node=8",
            "topology.tensor_parallel_size=8",
        ],
        "topology.tensor_parallel_size",
        "12 attention heads",
    ),
    (
        ["model=sew_resnet50", "topology=channel_tp", *TORCHRUN2],
        "topology.tensor_parallel_size",
        "Bottleneck",
    ),
    (
        ["model=sew_resnet101", "topology=pp", *TORCHRUN2],
        "topology.pipeline_parallel_size",
        "Bottleneck",
    ),
    (
        ["topology=pp", *TORCHRUN2, "topology.pipeline_microbatches=3"],
        "topology.pipeline_microbatches",
        "divide trainer.batch_size",
    ),
    (
        ["topology=ddp", *TORCHRUN2, "topology.pipeline_microbatches=2"],
        "topology.pipeline_microbatches",
        "pp=1",
    ),
    (
        ["topology=ddp", *TORCHRUN2, "topology.data_parallel=zero3"],
        "topology.data_parallel",
        "ddp, fsdp2",
    ),
    (
        ["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=0"],
        "launcher.nproc_per_node",
        ">= 1",
    ),
    (["launcher=torchrun", "launcher.nnodes=2"], "launcher.rdzv_endpoint", "rendezvous endpoint"),
    (["launcher=torchrun", "launcher.max_restarts=-1"], "launcher.max_restarts", ">= 0"),
    (
        ["launcher=slurm", "launcher.gpus_per_node=4", "launcher.tasks_per_node=2", "topology=ddp"],
        "launcher.tasks_per_node",
        "launcher.tasks_per_node=4",
    ),
    (["launcher=slurm", "launcher.timeout_min=0"], "launcher.timeout_min", ">= 1"),
    (["launcher=slurm", "launcher.array_parallelism=0"], "launcher.array_parallelism", ">= 1"),
    (["trainer.global_batch_size=0"], "trainer.global_batch_size", ">= 1"),
    (
        [
            "topology=ddp",
            "launcher=torchrun",
            "launcher.nproc_per_node=3",
            "data.val_size=63",
            "trainer.global_batch_size=32",
        ],
        "trainer.global_batch_size",
        "trainer.global_batch_size=30 or trainer.global_batch_size=33",
    ),
    (
        [
            "topology=pp",
            "launcher=torchrun",
            "launcher.nproc_per_node=2",
            "trainer.global_batch_size=32",
            "trainer.batch_size=8",
        ],
        "trainer.batch_size",
        "topology.pipeline_microbatches=4",
    ),
    (["launcher=slurm", "launcher.wait=later"], "launcher.wait", "true or false"),
    (["launcher=slurm", "launcher.snapshot=sometimes"], "launcher.snapshot", "true or false"),
    (
        ["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=5"],
        "data.val_size",
        "divisible by 5",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "key", "valid"), INVALID, ids=[" ".join(o) for o, _, _ in INVALID]
)
def test_invalid_config_names_key_value_and_valid_choice(
    overrides: list[str], key: str, valid: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        plan_for(overrides)
    message = str(caught.value)
    assert caught.value.key == key, message
    assert valid in message, message
    assert "\n" not in message
    # Where the case sets the named key itself, the message names the value it was given.
    given = [
        override.value()
        for override in OverridesParser.create().parse_overrides(overrides)
        if override.key_or_group == key and key not in GROUPS
    ]
    for value in given:
        assert caught.value.value == value, message
        written = (  # as the user typed it
            ("true" if value else "false")
            if isinstance(value, bool)
            else "null"
            if value is None
            else repr(value)
        )
        assert f"{key}={written}" in message, message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["topology=channel_tp"], "invalid config: topology="),
        (["trainer.precision=bf16"], "trainer.precision='bf16'"),
        (
            [
                "model=sew_resnet34",
                "topology=pp",
                "launcher=torchrun",
                "launcher.nproc_per_node=3",
                "topology.pipeline_parallel_size=3",
            ],
            "topology.pipeline_parallel_size=3",
        ),
        (
            ["model=no_such_model"],
            "invalid config: model='no_such_model': not an option of model; one of biggan, dcgan,",
        ),
        (
            ["trainer.no_such_key=1"],
            "invalid config: trainer.no_such_key=1: not a key of trainer=default; valid keys: ",
        ),
    ],
)
def test_cli_rejects_with_exit_2_one_message_and_no_run_directory(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli_in_process([*args, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not run_dir.exists()
    assert not (tmp_path / "outputs").exists()
    if expected.startswith("invalid config"):
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_sweep_with_one_invalid_point_is_rejected_before_any_point_runs(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_cli_in_process(
        ["-m", "topology=single,channel_tp", f"hydra.sweep.dir={sweep_dir}"], cwd=tmp_path
    )
    assert result.returncode == 2
    assert "sweep point 1 (topology=channel_tp): invalid config: topology=" in result.stderr
    assert "Traceback" not in result.stderr
    assert not sweep_dir.exists()


@pytest.mark.slow
def test_sweep_dry_run_prints_every_point_and_writes_nothing(tmp_path: Path) -> None:
    import json

    result = run_cli_in_process(
        [
            "-m",
            "model=sew_resnet18,spikformer_tiny",
            "optimizer.lr=1e-3,3e-4",
            "dry_run=json",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    plans = json.loads(result.stdout)
    assert [(p["model"], p["library_config"]["optimizer_kwargs"]["lr"]) for p in plans] == [
        ("sew_resnet18", 1e-3),
        ("sew_resnet18", 3e-4),
        ("spikformer_tiny", 1e-3),
        ("spikformer_tiny", 3e-4),
    ]
    assert list(tmp_path.iterdir()) == []
