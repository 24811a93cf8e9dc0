# ruff: noqa: E501  (the table reads best one case a line)
"""Mistakes that used to pass validation and fail (or be ignored) after the run directory
existed: each is refused through the CLI's entry point, one line naming the key, exit 2,
nothing written. In-process (run_cli_in_process): a process start-up per case cost ~3 s each;
test_cli.py checks that the console script answers the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import run_cli_in_process

CASES = [
    (
        ["+trainer.epoch=3"],
        "trainer.epoch=3: not a key of trainer=default; did you mean trainer.epochs?",
    ),
    (["+seeed=3"], "seeed=3: not a key of the run config; did you mean seed?"),
    (
        ["+topology.tensor_parallel=2"],
        "topology.tensor_parallel=2: not a key of topology=single; did you mean topology.tensor_parallel_size?",
    ),
    (["+launcher.nodes=2"], "launcher.nodes=2: not a key of launcher=local"),
    (["+optimizer.momentum=0.9"], "optimizer.momentum=0.9: not an argument of AdamW"),
    (
        ["optimizer=sgd", "+optimizer.nesterv=true"],
        "optimizer.nesterv=true: not an argument of SGD; did you mean optimizer.nesterov?",
    ),
    (
        ["trainer.scheduler=torch.optim.lr_scheduler.CosineAnnealingLR"],
        "trainer.scheduler_kwargs.T_max=null: required by CosineAnnealingLR",
    ),
    (
        [
            "trainer.scheduler=torch.optim.lr_scheduler.StepLR",
            "+trainer.scheduler_kwargs.step_sze=3",
        ],
        "trainer.scheduler_kwargs.step_sze=3: not an argument of StepLR; did you mean trainer.scheduler_kwargs.step_size?",
    ),
    (
        ["+trainer.scheduler_kwargs.gamma=0.5"],
        "trainer.scheduler_kwargs={'gamma': 0.5}: {} without trainer.scheduler",
    ),
    (["model.time_steps=abc"], "model.time_steps='abc': an integer >= 1"),
    (["model.time_steps=0"], "model.time_steps=0: an integer >= 1"),
    (["model.tau=fast"], "model.tau='fast': a number"),
    (["model.detach_reset=3"], "model.detach_reset=3: true or false"),
    (["model.num_classes=abc"], "model.num_classes='abc': an integer >= 1"),
    (["model=spikformer", "model.in_channels=rgb"], "model.in_channels='rgb': an integer >= 1"),
    (["+trainer.lr=0.1"], "trainer.lr=0.1: not a key of trainer=default"),
    (
        ["+trainer.precison=bf16"],
        "trainer.precison='bf16': not a key of trainer=default; did you mean trainer.precision?",
    ),
    (["+launcher.nproc=2"], "launcher.nproc=2: not a key of launcher=local"),
    (
        ["launcher=torchrun", "+launcher.nproc_per_nod=2"],
        "launcher.nproc_per_nod=2: not a key of launcher=torchrun; did you mean launcher.nproc_per_node?",
    ),
    (["launcher=slurm", "+launcher.gpus=2"], "launcher.gpus=2: not a key of launcher=slurm"),
    (
        ["+topology.microbatches=2"],
        "topology.microbatches=2: not a key of topology=single; did you mean topology.pipeline_microbatches?",
    ),
    (["+epochs=3"], "epochs=3: not a key of the run config"),
    (["+optimizer.betas=[0.9]", "optimizer=sgd"], "optimizer.betas=[0.9]: not an argument of SGD"),
    (
        ["+optimizer.momentom=0.9", "optimizer=sgd"],
        "optimizer.momentom=0.9: not an argument of SGD; did you mean optimizer.momentum?",
    ),
    (
        ["trainer.scheduler=torch.optim.lr_scheduler.StepLR"],
        "trainer.scheduler_kwargs.step_size=null: required by StepLR",
    ),
    (
        ["trainer.scheduler=torch.optim.lr_scheduler.OneCycleLR"],
        "trainer.scheduler_kwargs.max_lr=null: required by OneCycleLR",
    ),
    # A key Hydra cannot compose (misspelt, or of the wrong type for its schema): our one line
    # instead of Hydra's six, which advised `+trainer.epoch=3` (refused above).
    (
        ["trainer.epoch=3"],
        "trainer.epoch=3: not a key of trainer=default; did you mean trainer.epochs?",
    ),
    (
        ["optimizer.learning_rate=0.1"],
        "optimizer.learning_rate=0.1: not a key of optimizer=adamw; valid keys: optimizer.lr, optimizer.name, optimizer.weight_decay; or add an argument the option does not set: +optimizer.learning_rate=...",
    ),
    (["modle=sew_resnet34"], "modle='sew_resnet34': not a config group; did you mean model?"),
    (["sed=3"], "sed=3: not a key of the run config; did you mean seed?"),
    (
        ["model=sew_resnt18"],
        "model='sew_resnt18': not an option of model; did you mean model=sew_resnet18?",
    ),
    (["topology.tensor_parallel_size=two"], "topology.tensor_parallel_size='two': an integer"),
    (
        ["launcher=torchrun", "launcher.monitor_interval=soon"],
        "launcher.monitor_interval='soon': a number",
    ),
    (
        ["logger=wandb", "logger.wandb.mode=live"],
        "logger.wandb.mode='live': one of offline, online, disabled",
    ),
    (
        ["trainer.early_stopping.patience=some"],
        "trainer.early_stopping.patience='some': an integer, or null",
    ),
    (["seed=abc"], "seed='abc': an integer"),
    (["preflight=maybe"], "preflight='maybe': true or false"),
    # Types hold for every family: a GAN's MMGen recipe never reads data.num_classes (the
    # issue's command, on the GAN's own data: the default, digits)
    (
        ["model=ggan", "data=digits", "data.num_classes=[1,2]"],
        "data.num_classes=[1, 2]: an integer",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "message"), CASES, ids=[" ".join(o) for o, _ in CASES])
def test_refused_before_launch_naming_the_key(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    data = [] if any(o.startswith("data=") for o in overrides) else ["data=synthetic"]
    result = run_cli_in_process([*overrides, *data, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-1000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == f"error: invalid config: {message}" or lines[0].startswith(
        f"error: invalid config: {message}"
    ), lines[0]
    assert not run_dir.exists()
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_misspelt_key_in_a_sweep_is_one_line_for_each_point(tmp_path: Path) -> None:
    result = run_cli_in_process(
        ["-m", "trainer.epoch=1,2", "data=synthetic", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"error: sweep point {n} (trainer.epoch={n + 1} data=synthetic): invalid config: "
        f"trainer.epoch={n + 1}: not a key of trainer=default; did you mean trainer.epochs?"
        for n in (0, 1)
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("file", "text", "args", "message"),
    [
        (
            "experiment/mine.yaml",
            "# @package _global_\ntopology:\n  tensor_parallel_size: two\n",
            ["experiment=mine"],
            "topology.tensor_parallel_size='two': an integer (in experiment/mine.yaml)",
        ),
        (
            "experiment/mine.yaml",
            "# @package _global_\ntrainer:\n  spikes:\n    imgs: 8\n",
            ["experiment=mine"],
            "trainer.spikes.imgs: not a key of trainer.spikes; did you mean "
            "trainer.spikes.images? (in experiment/mine.yaml)",
        ),
        # an option of the user's own that does not name its schema is typed all the same
        (
            "topology/mine.yaml",
            "name: mine\ndata_parallel: ddp\ntensor_parallel_size: 0\n"
            "pipeline_parallel_size: 1\npipeline_microbatches: 1\n",
            ["topology=mine"],
            "topology.tensor_parallel_size=0: a positive integer",
        ),
        (
            "topology/mine.yaml",
            "name: mine\ndata_parallel: zero3\ntensor_parallel_size: 1\n"
            "pipeline_parallel_size: 1\npipeline_microbatches: 1\n",
            ["topology=mine"],
            "topology.data_parallel='zero3': one of ddp, fsdp2",
        ),
    ],
)
def test_configs_of_the_users_own_are_typed_too(
    file: str, text: str, args: list[str], message: str, tmp_path: Path
) -> None:
    """`--config-dir` (README): a preset's wrong value is named with its file, and a group
    option that does not list its schema gets the schema's checks anyway."""
    config_dir = tmp_path / "myconf"
    (config_dir / file).parent.mkdir(parents=True)
    (config_dir / file).write_text(text)
    run_dir = tmp_path / "run"
    result = run_cli_in_process(
        ["--config-dir", str(config_dir), *args, "data=synthetic", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: invalid config: {message}"), lines
    assert not run_dir.exists()


@pytest.mark.slow
def test_adding_a_real_optional_argument_still_plans(tmp_path: Path) -> None:
    """The checks refuse what the class cannot take, not what our yaml does not list."""
    result = run_cli_in_process(
        [
            "optimizer=sgd",
            "+optimizer.nesterov=true",
            "trainer.scheduler=torch.optim.lr_scheduler.StepLR",
            "+trainer.scheduler_kwargs.step_size=3",
            "dry_run=json",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"nesterov": true' in result.stdout


@pytest.fixture(scope="module")
def three_classes(module_tmp: Callable[[str], Path]) -> Path:
    """train/<a,b,c>/ with 5 tiny PNGs each, and no val/ folder."""
    import numpy as np
    from PIL import Image

    root = module_tmp("three_classes")
    generator = np.random.default_rng(0)
    for name in ("a", "b", "c"):
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for index in range(5):
            pixels = (generator.random((16, 16, 3)) * 255).astype("uint8")
            Image.fromarray(pixels).save(folder / f"{index}.png")
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["data.num_classes=2", "data.val_fraction=0.2"],
            "data.num_classes=2: {train} has 3 class folders (a, b, c); set data.num_classes=3",
        ),
        (
            ["data.num_classes=1000", "data.val_fraction=0.2"],
            "data.num_classes=1000: {train} has 3 class folders",
        ),
        (
            [],
            "data.root='{root}': no folder {root}/val; add val/<class>/ folders, or set data.val_fraction=0.1",
        ),
        (["data.val_fraction=1.5"], "data.val_fraction=1.5: a fraction between 0 and 1"),
        (
            ["data.train_subdirectory=nope", "data.val_fraction=0.2"],
            "data.root='{root}': no folder {root}/nope",
        ),
    ],
)
def test_image_folder_classes_and_split_are_checked(
    overrides: list[str], message: str, three_classes: Path, tmp_path: Path
) -> None:
    result = run_cli_in_process(
        [
            "data=imagefolder",
            f"data.root={three_classes}",
            "data.image_size=16",
            *overrides,
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    expected = message.format(root=three_classes, train=three_classes / "train")
    assert result.stderr.strip().splitlines()[0].startswith(f"error: invalid config: {expected}")
    assert list(tmp_path.iterdir()) == []


def test_image_folder_class_count_is_read_and_val_fraction_splits_seeded(
    three_classes: Path,
) -> None:
    from experiments.data.image_folder import build_imagefolder_datasets

    from .conftest import plan_for

    plan = plan_for(
        [
            "data=imagefolder",
            f"data.root={three_classes}",
            "data.image_size=16",
            "data.val_fraction=0.2",
            "seed=5",
        ]
    )
    assert plan.model_config.num_classes == 3  # from the folders, not the default 1000
    kwargs = plan.training_config.dataset_kwargs
    assert (kwargs["val_fraction"], kwargs["val_split_seed"]) == (0.2, 5)
    train, val = build_imagefolder_datasets(**kwargs)
    _, again_val = build_imagefolder_datasets(**kwargs)
    assert (len(train), len(val)) == (12, 3)
    assert not set(train.indices) & set(val.indices)
    assert sorted(train.indices + val.indices) == list(range(15))
    assert val.indices == again_val.indices  # the same split on every rank and re-run
    other = build_imagefolder_datasets(**{**kwargs, "val_split_seed": 6})[1]
    assert other.indices != val.indices
