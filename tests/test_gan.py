"""GAN family: MMGen's recipes composed by our groups, trained by MMGen's train_model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from experiments.errors import ConfigError
from experiments.plan_gan import GANPlan

from .conftest import CLI, plan_for, read_jsonl, run_cli

RECIPES = {  # model option -> (MMGen recipe file, its GAN loss)
    "dcgan": ("dcgan/dcgan_mnist-64_b128x1_Glr4e-4_Dlr1e-4_5k.py", "vanilla"),
    "lsgan": ("lsgan/lsgan_dcgan-archi_lr-1e-3_celeba-cropped_64_b128x1_12m.py", "lsgan"),
    "ggan": ("ggan/ggan_celeba-cropped_dcgan-archi_lr-1e-3_64_b128x1_12m.py", "hinge"),
}
# A few iterations: small batch, every interval 2, a 64-image quality check.
TINY = [
    "model.iters=4",
    "model.batch_size=16",
    "model.log_interval=1",
    "model.sample_interval=2",
    "model.checkpoint_interval=2",
    "model.num_samples=16",
    "model.eval_images=64",
]


def _run(args: list[str], run_dir: Path, **kwargs) -> None:
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], cwd=run_dir.parent, **kwargs)
    assert result.returncode == 0, result.stderr[-4000:]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _checkpoints(run_dir: Path) -> Path:
    return run_dir / "ckpt" / run_dir.name


@pytest.mark.parametrize("model", sorted(RECIPES))
def test_each_recipe_composes_from_mmgens_own_config(model: str) -> None:
    plan = plan_for([f"model={model}"])
    assert isinstance(plan, GANPlan) and plan.engine == "mmgen"
    recipe, loss = RECIPES[model]
    assert plan.recipe.recipe == recipe
    cfg = plan.mmgen_config
    assert cfg.filename.endswith(recipe)  # loaded from mmgen's bundled file
    assert cfg.model.gan_loss.gan_type == loss  # the recipe's own choices are kept
    assert cfg.model.generator.output_scale == 32 and cfg.model.discriminator.input_scale == 32
    assert cfg.model.generator.out_channels == 1  # digits are grey
    assert cfg.data.train.imgs_root.endswith("digits_png_v1")
    assert cfg.total_iters == 1000 and cfg.data.samples_per_gpu == 64
    assert cfg.work_dir == str(plan.run_dir)
    assert plan.parameters["generator"] > 0 and plan.parameters["discriminator"] > 0


def test_imagefolder_feeds_colour_images(imagefolder: Path) -> None:
    plan = plan_for(["model=lsgan", "data=imagefolder", f"data.root={imagefolder}"])
    cfg = plan.mmgen_config
    assert cfg.data.train.imgs_root == str(imagefolder / "train")
    assert cfg.model.generator.out_channels == 3
    load = next(s for s in cfg.data.train.pipeline if s["type"] == "LoadImageFromFile")
    assert load["flag"] == "color"


@pytest.mark.parametrize("topology", ["fsdp2", "channel_tp", "pp"])
def test_fsdp2_tp_and_pp_are_rejected_for_gans(topology: str) -> None:
    with pytest.raises(ConfigError) as error:
        plan_for(["model=dcgan", f"topology={topology}", "launcher=torchrun"])
    assert error.value.key == "topology"
    assert "topology=single or topology=ddp" in str(error.value)


def test_slurm_dry_run_plans_the_gan_as_a_one_point_sweep(tmp_path: Path) -> None:
    result = run_cli(
        ["model=dcgan", "topology=ddp", "launcher=slurm", "launcher.tasks_per_node=2",
         "dry_run=json", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads(result.stdout)
    assert (plan["engine"], plan["world_size"], plan["launcher"]) == ("mmgen", 2, "slurm")
    assert any("#SBATCH --ntasks-per-node=2" in line for line in plan["command"])
    assert not (tmp_path / "sweep").exists()


def test_stylegan2_ada_recipe_fails_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        plan_for(["model=stylegan_ada"])
    assert error.value.key == "model.recipe"
    assert "StyleGAN2-ADA is unavailable" in str(error.value)
    result = run_cli(["model=stylegan_ada", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert result.returncode == 2
    assert "StyleGAN2-ADA is unavailable" in result.stderr
    assert "Traceback" not in result.stderr and "ModuleNotFoundError" not in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["resume_from={ckpt}", "load_from={ckpt}"], "load_from"),
        (["resume_from=/no/such/iter_10.pth"], "resume_from"),
        (["load_from=/no/such/iter_10.pth"], "load_from"),
        (["resume={dir}"], "resume"),
        (
            ["topology=ddp", "topology.data_parallel=fsdp2", "launcher=torchrun"],
            "topology.data_parallel",
        ),
        (["trainer.precision=bf16"], "trainer.precision"),
        (["trainer.profile_steps=3"], "trainer.profile_steps"),
        (["model.scale=48"], "model.scale"),
        (["model.recipe=dcgan/no_such_recipe.py"], "model.recipe"),
        (["+model.cfg_options.model.generator.no_such_argument=1"], "model.cfg_options"),
        (["data=synthetic"], "data"),
    ],
)
def test_conflicting_or_bad_gan_settings_are_config_errors(
    overrides: list[str], key: str, tmp_path: Path
) -> None:
    ckpt = tmp_path / "iter_2.pth"
    ckpt.write_bytes(b"x")
    overrides = [o.format(ckpt=ckpt, dir=tmp_path) for o in overrides]
    with pytest.raises(ConfigError) as error:
        plan_for(["model=dcgan", *overrides])
    assert error.value.key == key


def test_without_mmgen_a_gan_model_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An SNN-only install (no `make setup-gan`): importlib finds no mmgen."""
    monkeypatch.setitem(sys.modules, "mmgen", None)
    with pytest.raises(ConfigError) as error:
        plan_for(["model=dcgan"])
    assert error.value.key == "model"
    assert "make setup-gan" in str(error.value)


def test_snn_runs_reject_mmgens_checkpoint_keys(tmp_path: Path) -> None:
    ckpt = tmp_path / "iter_2.pth"
    ckpt.write_bytes(b"x")
    with pytest.raises(ConfigError) as error:
        plan_for([f"load_from={ckpt}"])
    assert error.value.key == "load_from" and "resume=" in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(RECIPES))
def test_few_iterations_write_checkpoints_samples_and_change_the_generator(
    model: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    _run([f"model={model}", *TINY], run_dir)

    summary = _summary(run_dir)
    assert (summary["status"], summary["engine"], summary["model"]) == ("completed", "mmgen", model)
    metrics = summary["metrics"]
    for key in ("loss_gen", "loss_disc", "swd", "ms_ssim"):
        assert np.isfinite(metrics[key]), key
    assert {".hydra", "metrics.jsonl", "mmgen_config.py", "tensorboard"} <= {
        p.name for p in run_dir.iterdir()
    }
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[-1]["loss_gen"] == pytest.approx(metrics["loss_gen"])

    assert sorted(p.name for p in _checkpoints(run_dir).glob("iter_*.pth")) == [
        "iter_2.pth",
        "iter_4.pth",
    ]
    samples = run_dir / "training_samples"
    assert {"iter_2.png", "iter_4.png", "final.png"} <= {p.name for p in samples.iterdir()}
    # MMGen's sample hook draws every grid from the same fixed noise: a different picture
    # means the generator changed between iteration 2 and 4.
    early = np.asarray(Image.open(samples / "iter_2.png"), dtype=np.int16)
    late = np.asarray(Image.open(samples / "iter_4.png"), dtype=np.int16)
    assert early.shape == late.shape == (128, 128, 3)  # 4 x 4 grid of 32 x 32
    assert (early != late).any()
    first = _generator_parameters(_checkpoints(run_dir) / "iter_2.pth")
    last = _generator_parameters(_checkpoints(run_dir) / "iter_4.pth")
    assert any(not torch.equal(first[key], last[key]) for key in first)


@pytest.mark.slow
def test_imagefolder_colour_images_train(tmp_path: Path, imagefolder: Path) -> None:
    run_dir = tmp_path / "run"
    _run(["model=lsgan", "data=imagefolder", f"data.root={imagefolder}", *TINY], run_dir)
    assert _summary(run_dir)["metrics"]["eval_images"] == 40  # all 40 training images
    grid = Image.open(run_dir / "training_samples" / "final.png")
    assert grid.mode == "RGB" and grid.size == (128, 128)


def _generator_parameters(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    return {  # parameters, not BatchNorm's statistics (they move even at lr 0)
        k: v
        for k, v in state.items()
        if k.startswith("generator.") and "running_" not in k and "num_batches" not in k
    }


@pytest.mark.slow
def test_resume_from_continues_and_load_from_restarts_with_loaded_weights(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source"
    _run(["model=dcgan", *TINY], source)
    saved = _checkpoints(source) / "iter_2.pth"

    resumed = tmp_path / "resumed"
    _run(["model=dcgan", *TINY, f"resume_from={saved}"], resumed)
    assert [r["step"] for r in read_jsonl(resumed / "metrics.jsonl")] == [3, 4]
    assert _summary(resumed)["start"] == "resume_from"
    meta = torch.load(_checkpoints(resumed) / "iter_4.pth", map_location="cpu", weights_only=True)
    assert meta["meta"]["iter"] == 4

    # load_from: weights only, iteration 0. With learning rates 0 the weights stay the
    # loaded ones, so they must equal the checkpoint's.
    loaded = tmp_path / "loaded"
    frozen = [
        "+model.cfg_options.optimizer.generator.lr=0.0",
        "+model.cfg_options.optimizer.discriminator.lr=0.0",
    ]
    _run(["model=dcgan", *TINY, *frozen, f"load_from={saved}"], loaded)
    assert [r["step"] for r in read_jsonl(loaded / "metrics.jsonl")] == [1, 2, 3, 4]
    assert _summary(loaded)["start"] == "load_from"
    before, after = (
        _generator_parameters(saved),
        _generator_parameters(_checkpoints(loaded) / "iter_4.pth"),
    )
    assert before.keys() == after.keys() and before
    for key in before:
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=0)


@pytest.mark.slow
def test_rerun_after_a_kill_resumes_from_the_newest_readable_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [
        "model=dcgan",
        "model.iters=400",
        "model.batch_size=16",
        "model.log_interval=1",
        "model.checkpoint_interval=2",
        "model.sample_interval=1000",
        "model.eval_images=64",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.Popen([CLI, *args], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 300
    while not (_checkpoints(run_dir) / "iter_6.pth").exists():
        assert proc.poll() is None and time.time() < deadline, "no checkpoint before the kill"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = sorted(
        _checkpoints(run_dir).glob("iter_*.pth"), key=lambda p: int(p.stem.split("_")[1])
    )
    # The newest file may be the one the kill cut short; make sure: truncate it.
    newest, previous = saved[-1], saved[-2]
    newest.write_bytes(newest.read_bytes()[:100])

    result = run_cli(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = _summary(run_dir)
    assert summary["start"] == "auto_resume"
    assert summary["start_checkpoint"] == str(previous)
    assert summary["resumes"] == 1
    steps = [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == list(range(1, 401))  # one record per iteration across the kill


@pytest.mark.slow
@pytest.mark.dist
def test_two_cpu_ranks_train_with_mmgens_distributed_path(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _run(
        [
            "model=dcgan",
            "topology=ddp",
            "launcher=torchrun",
            "launcher.nproc_per_node=2",
            *TINY,
        ],
        run_dir,
    )
    summary = _summary(run_dir)
    assert (summary["status"], summary["world_size"]) == ("completed", 2)
    assert summary["batch"] == {"per_rank": 16, "global": 32}
    assert summary["metrics"]["replica_max_diff"] == 0.0  # the dynamic-DDP reducer synced them
    assert {"train_rank0.log", "train_rank1.log"} <= {p.name for p in run_dir.iterdir()}
    assert (_checkpoints(run_dir) / "iter_4.pth").exists()
    assert (run_dir / "training_samples" / "final.png").exists()
    cfg = (run_dir / "mmgen_config.py").read_text()
    assert "is_dynamic_ddp=True" in cfg.replace(" ", "")


@pytest.mark.slow
def test_main_sized_demo_draws_digits(tmp_path: Path, figures) -> None:
    """`experiments-train model=dcgan data=digits` as the README shows it: MMGen's SWD of
    the generated images to the digits falls from ~250 (untrained) to near the real-vs-real
    level (~10 at 1024 images); MS-SSIM stays low (diverse samples, no mode collapse)."""
    run_dir = tmp_path / "demo"
    started = time.time()
    _run(["model=dcgan", "data=digits"], run_dir, timeout=900)
    wall = time.time() - started
    metrics = _summary(run_dir)["metrics"]
    figures(
        wall_s=round(wall, 1),
        swd=round(metrics["swd"], 2),
        ms_ssim=round(metrics["ms_ssim"], 3),
        ms_ssim_real=round(metrics["ms_ssim_real"], 3),
        images_per_second=round(metrics["images_per_second"], 1),
    )
    assert metrics["swd"] < 40
    assert metrics["ms_ssim"] < 0.5
    grid = np.asarray(Image.open(run_dir / "training_samples" / "final.png").convert("L"))
    assert grid.shape == (256, 256)
    # Digit strokes: mostly dark background with bright strokes, as in the data.
    assert 0.05 < (grid > 128).mean() < 0.5


@pytest.mark.slow
def test_sweep_over_recipes_reports_swd_lower_is_better(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # `++`: the keys exist in GAN models only, and Hydra composes the sweep's base config with
    # the default (SNN) model before it expands model=dcgan,lsgan.
    tiny = ["++" + option for option in TINY]
    result = run_cli(["-m", "model=dcgan,lsgan", *tiny, f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    report = (sweep / "report.md").read_text()
    assert "Best swd" in report and "(lower is better)" in report
    header = next(line for line in report.splitlines() if line.startswith("| point"))
    assert "| swd | ms_ssim | loss_gen | loss_disc |" in header
    assert (sweep / "learning_curves.png").stat().st_size > 10_000
    assert (sweep / "metric_vs_model.png").exists()
