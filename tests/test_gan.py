"""GAN family: MMGen's recipes composed by our groups, trained by MMGen's train_model.

Budget: only the demo test trains at demo length. Each recipe trains once at a short size
(module fixture `trained`), read by several tests: learning against the untrained generator,
the run directory's files and records, and (dcgan) the source checkpoint of resume_from and
load_from. The recipes that learn at the same batch (dcgan, ggan) train as the two points of
one sweep (module fixture `learned`): its report is the recipe sweep's test, and its points
start warm, forked from one process that imported torch and the engine once. Everything else
trains tiny: a few iterations (the kill test a few dozen, so that the kill lands mid-run). The
tiny lsgan run on colour images (module fixture `colour_run`) is also the logger group's GAN
run: it logs into every logger, read back here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from experiments.errors import ConfigError
from experiments.gan.plan import GANPlan

from .conftest import CLI, SITE, on_python_path, plan_for, read_jsonl, run_cli, run_cli_in_process
from .recorded_data import read_indices
from .support import gc_records
from .support.logger_records import csv_rows, history, mlflow_runs, same, tensorboard_events
from .support.wandb_records import read_run

pytestmark = pytest.mark.gan

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
# Short training that clears SWD < LEARNED x SWD of the untrained generator, with margin.
# Measured: SWD trained / untrained after 300 iterations (MMGen's SWD on 128 images, seeds
# 1234 and 1-5, a loaded 2-core CPU; the untrained generator scores ~240, real digits
# against other real digits ~24):
#   dcgan, batch 16: 0.16-0.22 (250 iterations: 0.20-0.27; 200: 0.29-0.43 on 256 images)
#   lsgan, batch 32: 0.19-0.22 (at batch 16 it oscillates: 0.18-0.27 on 256 images)
#   ggan,  batch 16: 0.13-0.17
LEARNED = 0.3
LEARN_ITERS = 300
EVAL_IMAGES = 128
LEARN_BATCH = {  # per recipe: lsgan (lr 1e-3, least squares) oscillates at batch 16
    "dcgan": 16,
    "lsgan": 32,
    "ggan": 16,
}


# Trained as the points of one sweep (`learned`): the recipes of one LEARN_BATCH.
SWEPT = ("dcgan", "ggan")


def _learn(batch: int) -> list[str]:
    """The LEARN size's model options, at `batch` images an iteration."""
    return [
        f"model.iters={LEARN_ITERS}",
        f"model.batch_size={batch}",
        "model.log_interval=1",
        f"model.sample_interval={LEARN_ITERS // 2}",
        f"model.checkpoint_interval={LEARN_ITERS // 2}",
        "model.num_samples=16",
        f"model.eval_images={EVAL_IMAGES}",
        "model.eval_untrained=true",
    ]


def _with(options: list[str], *changes: str) -> list[str]:
    """`options` with the keys of `changes` set to their new values."""
    keys = {change.split("=", 1)[0] for change in changes}
    return [o for o in options if o.split("=", 1)[0] not in keys] + list(changes)


# GAN runs get the environment a user's shell gives them (torch's default threads): CI runs the
# suite alone, and there two threads are faster (300 dcgan iterations: 18.8 s vs 29.2 s with
# OMP_NUM_THREADS=1; the demo 105 s vs 179 s). On a machine shared with other work, set
# OMP_NUM_THREADS=1 for the session: two threads per process then wait on each other
# (measured at load ~4: 100 iterations in 5-6 s with one thread, 40-94 s with two).
THREADS: dict[str, str] = {}


def _run(args: list[str], run_dir: Path, **kwargs) -> None:
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], cwd=run_dir.parent, env=THREADS, **kwargs)
    assert result.returncode == 0, result.stderr[-4000:]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _checkpoints(run_dir: Path) -> Path:
    return run_dir / "ckpt" / run_dir.name


def _iteration(checkpoint: Path) -> int:
    return int(checkpoint.stem.split("_")[1])


def _mmgen_log(path: Path) -> list[dict]:
    """MMGen's own record of training: TextLoggerHook's <timestamp>.log.json (train lines)."""
    return [r for r in read_jsonl(path) if r.get("mode") == "train"]


def _mmgen_log_of(run_dir: Path) -> list[dict]:
    (path,) = run_dir.glob("*.log.json")
    return _mmgen_log(path)


def _loss_sums(line: dict) -> tuple[float, float]:
    """(generator, discriminator): the sums of MMGen's logged loss terms of one iteration
    (`loss_*_g` are the generator's; `loss` is their total, not a term)."""
    gen = [v for k, v in line.items() if k.startswith("loss_") and k.endswith("_g")]
    disc = [v for k, v in line.items() if k.startswith("loss_") and not k.endswith("_g")]
    assert gen and disc, line
    return sum(gen), sum(disc)


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
    assert cfg.total_iters == {"dcgan": 600}.get(model, 1000)  # our model.iters, in MMGen's config
    assert cfg.data.samples_per_gpu == 64
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
    result = run_cli_in_process(
        [
            "model=dcgan",
            "topology=ddp",
            "launcher=slurm",
            "launcher.tasks_per_node=2",
            "dry_run=json",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads(result.stdout)
    assert (plan["engine"], plan["world_size"], plan["launcher"]) == ("mmgen", 2, "slurm")
    assert any("#SBATCH --ntasks-per-node=2" in line for line in plan["command"])
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow  # starts the CLI
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


def test_mmcv_full_compiled_ops_load_and_run() -> None:
    """mmcv-full, not mmcv-lite: its compiled library loads and one of its ops computes."""
    import importlib.util

    from mmcv.ops import nms

    origin = importlib.util.find_spec("mmcv._ext").origin
    assert origin.endswith(".so"), origin  # the C++ extension the wheel was built with
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7])
    dets, keep = nms(boxes, scores, iou_threshold=0.5)  # IoU(0, 1) = 81 / 119
    assert keep.tolist() == [0, 2]
    torch.testing.assert_close(dets, torch.tensor([[0, 0, 10, 10, 0.9], [20, 20, 30, 30, 0.7]]))


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
        (["model.eval_untrained=2"], "model.eval_untrained"),
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


def test_quality_is_seeded_and_leaves_the_training_draws_unchanged() -> None:
    """The engine's SWD/MS-SSIM (run on the untrained generator before training with
    model.eval_untrained=true, and on the trained one at the end) gives one generator the
    same value every time, and leaves torch's, NumPy's and Python's generators as they were:
    asking for swd_untrained does not change what the run then trains."""
    from mmgen.datasets import build_dataset

    from experiments.data.image_files import ensure_digits_pngs
    from experiments.gan.quality import quality
    from experiments.gan.recipes import build_model

    plan = plan_for(["model=dcgan", "model.eval_images=16"])
    ensure_digits_pngs(plan.image_root)
    model = build_model(plan.mmgen_config).eval()
    dataset = build_dataset(plan.mmgen_config.data.train)
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    first, second = quality(model, dataset, plan), quality(model, dataset, plan)
    assert first["eval_images"] == 16 and np.isfinite(first["swd"])
    assert first == second
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2]


def test_swd_is_mmgens_to_the_last_bit_with_its_projections_sorted_by_numpy() -> None:
    """gan/sliced_wasserstein.py replaces MMGen's sliced_wasserstein inside our processes
    (its torch.sort along dim 0 was 23 of SWD's 26 s at 1024 images): the same draws give the
    library's own value exactly, on descriptors with ties and signed zeros, and SWD uses it."""
    from experiments.gan import mmgen_compat, sliced_wasserstein

    mmgen_compat.import_mmgen()  # first: mmgen imports only with its ADA stand-in
    import mmgen.core.evaluation.metrics as metrics

    assert metrics.sliced_wasserstein is sliced_wasserstein.sliced_wasserstein
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(4096, 147, generator=generator)
    b = torch.randn(4096, 147, generator=generator) * 1.5 + 0.1
    b[:512] = a[:512]  # equal projections: ties across the two sets
    a[-64:], b[-64:] = 0.0, -0.0
    values = []
    for function in (metrics.library_sliced_wasserstein, metrics.sliced_wasserstein):
        torch.manual_seed(11)
        values.append(function(a, b))
    assert values[0] == values[1] and values[0] > 0


@pytest.fixture(scope="module")
def learned(module_tmp: Callable[[str], Path]) -> Path:
    """The sweep directory of `-m model=dcgan,ggan` at the LEARN size (both learn at batch 16):
    one process imports torch and the engine for both runs, and its report is the recipe
    sweep's. `++`: the keys exist in GAN models only, and Hydra composes the sweep's base config
    with the default (SNN) model before it expands the models."""
    (batch,) = {LEARN_BATCH[model] for model in SWEPT}
    sweep = module_tmp("learned") / "sweep"
    options = ["++" + option for option in _learn(batch)]
    result = run_cli(
        ["-m", f"model={','.join(SWEPT)}", *options, f"hydra.sweep.dir={sweep}"],
        cwd=sweep.parent,
        timeout=500,
        env=THREADS,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return sweep


@pytest.fixture(scope="module", params=sorted(RECIPES))
def trained(request: pytest.FixtureRequest, module_tmp: Callable[[str], Path]):
    """(model, run directory): each recipe trained once at the LEARN size, read by several
    tests (pytest groups the tests of one recipe around its run): a point of `learned`, or
    (lsgan, at its own batch) a run of its own."""
    model = request.param
    if model in SWEPT:
        points = {
            _summary(p)["model"]: p for p in request.getfixturevalue("learned").glob("[0-9]*")
        }
        assert sorted(points) == sorted(SWEPT), points
        return model, points[model]
    run_dir = module_tmp(model) / "run"
    _run([f"model={model}", *_learn(LEARN_BATCH[model])], run_dir, timeout=500)
    return model, run_dir


@pytest.mark.slow
def test_each_recipe_learns_from_its_untrained_generator(
    trained: tuple[str, Path], figures
) -> None:
    """MMGen's SWD to the digits, by the same seeded code path on the same images, noise,
    patches and directions: the trained generator's is below LEARNED x the untrained one's."""
    model, run_dir = trained
    summary = _summary(run_dir)
    assert (summary["status"], summary["engine"], summary["model"]) == ("completed", "mmgen", model)
    metrics = summary["metrics"]
    figures(
        iters=LEARN_ITERS,
        batch=LEARN_BATCH[model],
        swd_untrained=round(metrics["swd_untrained"], 1),
        swd=round(metrics["swd"], 1),
        ratio=round(metrics["swd"] / metrics["swd_untrained"], 3),
    )
    for key in ("loss_gen", "loss_disc", "swd", "swd_untrained", "ms_ssim", "ms_ssim_untrained"):
        assert np.isfinite(metrics[key]), key
    assert metrics["eval_images"] == EVAL_IMAGES
    assert metrics["swd"] < LEARNED * metrics["swd_untrained"]


@pytest.mark.slow
def test_each_recipe_writes_records_checkpoints_and_samples_of_a_changing_generator(
    trained: tuple[str, Path],
) -> None:
    _, run_dir = trained
    half, full = LEARN_ITERS // 2, LEARN_ITERS
    assert {".hydra", "metrics.jsonl", "mmgen_config.py", "tensorboard"} <= {
        p.name for p in run_dir.iterdir()
    }
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, full + 1))
    # Our records and the summary against MMGen's own log (TextLoggerHook's json, every
    # iteration, 5 decimals): the generator's loss terms (`_g`) summed, and the
    # discriminator's, iteration by iteration.
    logged = _mmgen_log_of(run_dir)
    assert [r["iter"] for r in logged] == list(range(1, full + 1))
    for record, line in zip(records, logged, strict=True):
        gen, disc = _loss_sums(line)
        assert record["loss_gen"] == pytest.approx(gen, abs=1e-4), line["iter"]
        assert record["loss_disc"] == pytest.approx(disc, abs=1e-4), line["iter"]
    metrics = _summary(run_dir)["metrics"]
    gen, disc = _loss_sums(logged[-1])
    assert metrics["loss_gen"] == pytest.approx(gen, abs=1e-4)
    assert metrics["loss_disc"] == pytest.approx(disc, abs=1e-4)

    assert sorted(p.name for p in _checkpoints(run_dir).glob("iter_*.pth")) == sorted(
        [f"iter_{half}.pth", f"iter_{full}.pth"]
    )
    samples = run_dir / "training_samples"
    assert {f"iter_{half}.png", f"iter_{full}.png", "final.png"} <= {
        p.name for p in samples.iterdir()
    }
    # MMGen's sample hook draws every grid from the same fixed noise: a different picture
    # means the generator changed between the two grids.
    early = np.asarray(Image.open(samples / f"iter_{half}.png"), dtype=np.int16)
    late = np.asarray(Image.open(samples / f"iter_{full}.png"), dtype=np.int16)
    assert early.shape == late.shape == (128, 128, 3)  # 4 x 4 grid of 32 x 32
    assert (early != late).any()
    first = _generator_parameters(_checkpoints(run_dir) / f"iter_{half}.pth")
    last = _generator_parameters(_checkpoints(run_dir) / f"iter_{full}.pth")
    assert any(not torch.equal(first[key], last[key]) for key in first)


@pytest.mark.slow
def test_sweep_over_recipes_reports_swd_lower_is_better(learned: Path) -> None:
    """On `learned`: a sweep over recipes that the learning tests need anyway, so no sweep of
    its own is trained for its report."""
    sweep = learned
    report = (sweep / "report.md").read_text()
    assert "Best swd" in report and "(lower is better)" in report
    header = next(line for line in report.splitlines() if line.startswith("| point"))
    assert "| swd | ms_ssim | loss_gen | loss_disc |" in header
    assert (sweep / "learning_curves.png").stat().st_size > 10_000
    assert (sweep / "metric_vs_model.png").exists()


LOGGERS = "logger=[tensorboard,csv,mlflow,wandb]"


@pytest.fixture(scope="module")
def colour_run(module_tmp: Callable[[str], Path], imagefolder_session: Path) -> Path:
    """lsgan's TINY run on the session's colour image folder, into every logger: the GAN
    family's smoke run, and the GAN run whose loggers the logger group reads back (one run
    for both; test_loggers.py covers the SNN runs and the sweep)."""
    run_dir = module_tmp("colour") / "run"
    data = ["data=imagefolder", f"data.root={imagefolder_session}"]
    _run(["model=lsgan", *data, *TINY, LOGGERS], run_dir)
    return run_dir


@pytest.mark.slow
@pytest.mark.smoke  # the GAN family's tiny real run in `make check`
def test_imagefolder_colour_images_train(colour_run: Path) -> None:
    assert _summary(colour_run)["metrics"]["eval_images"] == 40  # all 40 training images
    grid = Image.open(colour_run / "training_samples" / "final.png")
    assert grid.mode == "RGB" and grid.size == (128, 128)


@pytest.mark.slow
def test_gan_run_logs_through_mmcv_hooks(colour_run: Path) -> None:
    """Per-iteration metrics come from mmcv's own logger hooks (their tags: learning_rate/*,
    momentum/*, the raw loss terms); parameters, tags, final metrics and the sample grids from
    the logger, into the same run."""
    run_dir = colour_run
    records = read_jsonl(run_dir / "metrics.jsonl")
    fake = [(r["step"], r["loss_disc_fake"]) for r in records]
    assert [s for s, _ in fake] == [1, 2, 3, 4]
    swd = _summary(run_dir)["metrics"]["swd"]

    client, (run,) = mlflow_runs(run_dir)
    hooked = history(client, run.info.run_id, "train/loss_disc_fake")
    assert same(hooked, fake, rel=1e-5)  # logged by mmcv's MlflowLoggerHook
    assert history(client, run.info.run_id, "learning_rate/generator")  # mmcv's tags
    assert run.data.metrics["final/swd"] == pytest.approx(swd)
    assert run.data.params["model.iters"] == "4" and run.data.tags["engine"] == "mmgen"
    artefacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"plan.json", "final.png", "iter_2.png", "iter_4.png"} <= artefacts

    wandb = read_run(run_dir)
    assert [h["_step"] for h in wandb["history"] if "learning_rate/generator" in h] == [1, 2, 3, 4]
    assert wandb["summary"]["final/swd"] == pytest.approx(swd)
    assert {"final.png", "plan.json"} <= set(wandb["files"])

    scalars, hparams = tensorboard_events(run_dir / "tensorboard")
    assert same(scalars["train/loss_disc_fake"], fake)  # mmcv's TensorboardLoggerHook
    assert same(scalars["final/swd"], [(0, swd)])
    assert hparams["model.iters"] == 4

    rows = csv_rows(run_dir)  # mmcv has no CSV hook: the recorder writes it
    assert same([(int(r["step"]), float(r["train/loss_disc_fake"])) for r in rows], fake)


def _generator_parameters(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    return {  # parameters, not BatchNorm's statistics (they move even at lr 0)
        k: v
        for k, v in state.items()
        if k.startswith("generator.") and "running_" not in k and "num_batches" not in k
    }


@pytest.mark.slow
@pytest.mark.parametrize("trained", ["dcgan"], indirect=True)
def test_resume_from_continues_and_load_from_restarts_with_loaded_weights(
    tmp_path: Path, trained: tuple[str, Path]
) -> None:
    """The source is the dcgan run of `trained` (its half-way checkpoint)."""
    half = LEARN_ITERS // 2
    saved = _checkpoints(trained[1]) / f"iter_{half}.pth"
    tiny = _with(TINY, "model.eval_images=0")  # no quality metric is read here

    # resume_from: weights, optimizers and the iteration counter; two more iterations.
    resumed = tmp_path / "resumed"
    _run(["model=dcgan", *_with(tiny, f"model.iters={half + 2}"), f"resume_from={saved}"], resumed)
    assert [r["step"] for r in read_jsonl(resumed / "metrics.jsonl")] == [half + 1, half + 2]
    assert [r["iter"] for r in _mmgen_log_of(resumed)] == [half + 1, half + 2]
    assert _summary(resumed)["start"] == "resume_from"
    # The resumed process saved only its own iteration (a fresh start would reach it only
    # after half + 2 iterations, saving at `half` first).
    assert [p.name for p in _checkpoints(resumed).glob("iter_*.pth")] == [f"iter_{half + 2}.pth"]
    # Both optimizers went on from the checkpoint's state, not from a fresh one.
    _assert_optimizers_continue(saved, _checkpoints(resumed) / f"iter_{half + 2}.pth", 2)

    # load_from: weights only, iteration 0. With learning rates 0 the weights stay the
    # loaded ones, so they must equal the checkpoint's.
    loaded = tmp_path / "loaded"
    frozen = [
        "+model.cfg_options.optimizer.generator.lr=0.0",
        "+model.cfg_options.optimizer.discriminator.lr=0.0",
    ]
    _run(["model=dcgan", *_with(tiny, "model.iters=2"), *frozen, f"load_from={saved}"], loaded)
    assert [r["step"] for r in read_jsonl(loaded / "metrics.jsonl")] == [1, 2]
    assert [r["iter"] for r in _mmgen_log_of(loaded)] == [1, 2]
    assert _summary(loaded)["start"] == "load_from"
    before, after = (
        _generator_parameters(saved),
        _generator_parameters(_checkpoints(loaded) / "iter_2.pth"),
    )
    assert before.keys() == after.keys() and before
    for key in before:
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=0)


def _assert_optimizers_continue(before: Path, after: Path, iterations: int) -> None:
    """Each optimizer's state in `after` continues the one in `before`, `iterations` Adam steps
    later: its step count went on, and its second moment only decayed by beta2 per step
    (v_t = beta2 v_(t-1) + (1 - beta2) g_t^2 >= beta2 v_(t-1), element by element). A resume
    that dropped the state restarts both: step == iterations, v ~ (1 - beta2) g^2, far below."""
    old = torch.load(before, map_location="cpu", weights_only=True)["optimizer"]
    new = torch.load(after, map_location="cpu", weights_only=True)["optimizer"]
    assert sorted(old) == sorted(new) == ["discriminator", "generator"]
    for name in old:
        beta2 = new[name]["param_groups"][0]["betas"][1]
        assert old[name]["state"].keys() == new[name]["state"].keys() and old[name]["state"]
        for key, state in new[name]["state"].items():
            previous = old[name]["state"][key]
            assert float(state["step"]) == float(previous["step"]) + iterations, (name, key)
            floor = beta2**iterations * previous["exp_avg_sq"]
            assert (state["exp_avg_sq"] >= floor * (1 - 1e-5)).all(), (name, key)


KILL_ITERS = 60  # killed once iter_4.pth exists: ~56 iterations (~1 s) of margin for the kill


@pytest.mark.slow
def test_rerun_after_a_kill_resumes_from_the_newest_readable_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [
        "model=dcgan",
        f"model.iters={KILL_ITERS}",
        "model.batch_size=16",
        "model.log_interval=1",
        "model.checkpoint_interval=2",
        f"model.sample_interval={KILL_ITERS * 10}",
        "model.eval_images=0",  # no quality metric is read here
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.Popen(
        [CLI, *args],
        cwd=tmp_path,
        start_new_session=True,
        env={**os.environ, **THREADS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 240
        while not (_checkpoints(run_dir) / "iter_4.pth").exists():
            assert proc.poll() is None, "the run ended before its 4th iteration"
            assert time.time() < deadline, "no checkpoint in 240 s"
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before the kill"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI and anything it started
        proc.wait()
    killed_at = time.time()
    assert _summary(run_dir)["status"] == "running"  # killed mid-run, nothing recorded it
    before = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert json.loads(before[-1])["step"] < KILL_ITERS
    saved = sorted(_checkpoints(run_dir).glob("iter_*.pth"), key=_iteration)
    # The newest file may be the one the kill cut short; make sure: truncate it.
    newest, previous = saved[-1], saved[-2]
    newest.write_bytes(newest.read_bytes()[:100])
    resumed_at = _iteration(previous)
    kept = [line for line in before if json.loads(line)["step"] <= resumed_at]
    assert len(kept) == resumed_at  # one record per iteration up to the checkpoint
    logs_before = set(run_dir.glob("*.log.json"))

    result = run_cli(args, cwd=tmp_path, env=THREADS)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = _summary(run_dir)
    assert summary["status"] == "completed"
    assert summary["start"] == "auto_resume"
    assert summary["start_checkpoint"] == str(previous)
    assert summary["resumes"] == 1
    after = (run_dir / "metrics.jsonl").read_text().splitlines()
    # The records up to the checkpoint are the killed process's, byte for byte (content and
    # timestamps); everything after them the resumed process wrote, from the checkpoint's
    # iteration + 1 on: one record per iteration across the kill.
    assert after[: len(kept)] == kept
    written = [json.loads(line) for line in after[len(kept) :]]
    assert all(record["time"] > killed_at for record in written)
    assert [r["step"] for r in written] == list(range(resumed_at + 1, KILL_ITERS + 1))
    # MMGen's own log of the resumed process (a new <timestamp>.log.json) agrees.
    (resumed_log,) = set(run_dir.glob("*.log.json")) - logs_before
    iters = [r["iter"] for r in _mmgen_log(resumed_log)]
    assert iters == list(range(resumed_at + 1, KILL_ITERS + 1))
    # ... and the optimizers' state continued from the checkpoint's, as did the weights.
    last = _checkpoints(run_dir) / f"iter_{KILL_ITERS}.pth"
    _assert_optimizers_continue(previous, last, KILL_ITERS - resumed_at)


@pytest.mark.slow
@pytest.mark.dist
def test_two_cpu_ranks_train_with_mmgens_distributed_path(tmp_path: Path) -> None:
    run_dir, reads = tmp_path / "run", tmp_path / "reads"
    # What each rank read, recorded by the test-only sitecustomize (tests/support/site).
    site = on_python_path(SITE)
    result = run_cli(
        [
            "model=dcgan",
            "topology=ddp",
            "launcher=torchrun",
            "launcher.nproc_per_node=2",
            *_with(TINY, "model.eval_images=0"),  # no quality metric is read here
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env={
            **THREADS,
            "PYTHONPATH": site,
            "EXPERIMENTS_TEST_RECORD_READS": str(reads),
            "EXPERIMENTS_TEST_RECORD_GC": str(tmp_path / "gc"),  # the collector at each step
        },
    )
    assert result.returncode == 0, result.stderr[-4000:]
    gc_records.assert_loops_ran_under_the_start_thresholds(tmp_path / "gc", processes=2)
    # Data parallel: each rank trained on its own share of the epoch. replica_max_diff == 0
    # below holds whether or not they did (the reducer averages equal gradients just as well),
    # so the reads themselves are compared: 4 iterations x 16 images each at least (a loader
    # may read ahead), and no image read by both ranks.
    indices = read_indices(reads)
    assert sorted(indices) == [0, 1]
    assert min(len(indices[0]), len(indices[1])) >= 4 * 16
    assert not set(indices[0]) & set(indices[1])
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
