"""GAN recipes beyond DCGAN: MMGen's class-conditional BigGAN with its EMA generator.

Budget: one module-scoped run (`trained`, LEARN_ITERS iterations at the yaml's CPU size) is read
by every slow test: learning (SWD against the untrained generator), conditioning (a digits
classifier trained here labels the grid's rows), the EMA generator (samples, checkpoint),
experiments-sample and experiments-export of a class-conditional EMA model (their main() in
this process: test_gan_sample_eval.py runs each console script once as a real process) and one
resumed iteration from its half-way checkpoint. Everything else plans in-process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from experiments.errors import ConfigError
from experiments.gan.plan import GANPlan

from .conftest import plan_for, read_jsonl, run_cli, tool_in_process

pytestmark = pytest.mark.gan

RECIPE = "biggan/biggan_cifar10_32x32_b25x2_500k.py"
CLASSES = 10
PER_CLASS = 10  # grid columns: one row per class
SCALE = 16  # the yaml's CPU size
# Measured (seed 1234, a loaded 2-core CPU, ~35 s): SWD trained / untrained 0.10 after 400
# iterations; the classifier labelled ~60% of the EMA generator's rows right (chance 10%);
# 91% on 2026-12-01 (per class 0.7-1.0; 2-core x86_64, load ~13, one thread), as README says.
LEARN_ITERS = 400
HALF = LEARN_ITERS // 2
LEARNED = 0.3  # SWD trained < LEARNED x SWD untrained
CONDITIONED = 0.5  # classifier accuracy on the rows (README: 91%), vs 1 / CLASSES by chance
EMA_MOMENTUM = 0.95  # conf/model/biggan.yaml
LEARN = [
    "model=biggan",
    f"model.iters={LEARN_ITERS}",
    "model.log_interval=1",
    f"model.sample_interval={HALF}",
    f"model.checkpoint_interval={HALF}",
    f"model.num_samples={CLASSES * PER_CLASS}",
    "model.eval_images=128",
    "model.eval_untrained=true",
]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _checkpoint(run_dir: Path, iteration: int) -> Path:
    return run_dir / "ckpt" / run_dir.name / f"iter_{iteration}.pth"


def _state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _generator_parameter_names(run_dir: Path) -> list[str]:
    """Trainable tensors of the generator (not BatchNorm statistics or spectral norm's u, v,
    which MMGen's EMA copies rather than averages), built from the run's dumped config."""
    model = _model_of(run_dir)
    return [name for name, _ in model.generator.named_parameters()]


def _model_of(run_dir: Path):
    """The run's model as MMGen's own tools build it: the dumped mmgen_config.py (its
    custom_imports register our dataset and sample hook) and mmgen's build_model."""
    import mmcv

    from experiments.gan import mmgen_compat

    mmgen_compat.import_mmgen()
    from mmgen.models import build_model

    cfg = mmcv.Config.fromfile(str(run_dir / "mmgen_config.py"))
    return build_model(cfg.model, train_cfg=cfg.train_cfg, test_cfg=cfg.test_cfg)


def _tiles(grid_png: Path, size: int) -> np.ndarray:
    """(rows, columns, size, size) grey tiles of a sample grid saved without padding."""
    grid = np.asarray(Image.open(grid_png).convert("L"), dtype=np.float64)
    rows, columns = grid.shape[0] // size, grid.shape[1] // size
    return grid.reshape(rows, size, columns, size).transpose(0, 2, 1, 3)


def _digits_classifier():
    """Multinomial logistic regression on scikit-learn's digits (8x8, values 0-16): ~97%
    accurate on held-out real digits."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    digits = load_digits()
    return LogisticRegression(max_iter=3000).fit(digits.data, digits.target)


def _as_digits(tiles: np.ndarray) -> np.ndarray:
    """Grid tiles (0-255, SCALE px) -> sklearn digits' features: 8x8 block means, 0-16."""
    count = tiles.shape[0]
    block = SCALE // 8
    small = tiles.reshape(count, 8, block, 8, block).mean(axis=(2, 4))
    return (small / 255.0 * 16.0).reshape(count, 64)


# ------------------------------------------------------------------ composition (in-process)


def test_biggan_composes_mmgens_conditional_ema_recipe_at_cpu_size() -> None:
    plan = plan_for(["model=biggan"])
    assert isinstance(plan, GANPlan) and plan.recipe.recipe == RECIPE
    cfg = plan.mmgen_config
    assert cfg.filename.endswith(RECIPE)  # MMGen's bundled file
    # The recipe's own choices are kept: conditional BigGAN, hinge loss, an EMA generator.
    assert cfg.model.type == "BasiccGAN" and cfg.model.gan_loss.gan_type == "hinge"
    assert cfg.train_cfg.use_ema is True
    # The data's classes and channels, and our labelled folder instead of mmcls.CIFAR10.
    assert cfg.model.num_classes == cfg.model.generator.num_classes == CLASSES
    assert cfg.model.discriminator.num_classes == CLASSES
    assert cfg.data.train.type == "LabelledImageFolder"
    assert cfg.data.train.imgs_root.endswith("digits_png_v1")
    assert cfg.model.generator.out_channels == 1 and cfg.model.discriminator.in_channels == 1
    assert cfg.model.discriminator.arch_cfg.in_channels[0] == 1
    assert "experiments.gan.datasets" in cfg.custom_imports.imports
    # CPU size through cfg_options: 16 px blocks, 1 discriminator step, an EMA from the start.
    assert cfg.model.generator.arch_cfg.resolution == [8, 16]
    assert cfg.train_cfg.disc_steps == 1
    hooks = {h["type"]: h for h in cfg.custom_hooks}
    ema = hooks["ExponentialMovingAverageHook"]
    assert ema["module_keys"] == ("generator_ema",)  # the recipe's own hook
    assert (ema["start_iter"], ema["interval"]) == (0, 1)
    assert ema["interp_cfg"]["momentum"] == EMA_MOMENTUM
    # One row per class, from the EMA generator.
    grid = hooks["VisualizeClassRows"]
    assert grid["num_classes"] == CLASSES and grid["kwargs"] == {"sample_model": "ema"}
    assert "VisualizeUnconditionalSamples" not in hooks
    # All of it in the dry run's library config.
    text = plan.as_text()
    for shown in (
        "type='LabelledImageFolder'",
        "arch_cfg=dict(",
        "momentum=0.95",
        "type='VisualizeClassRows'",
        "disc_steps=1",
    ):
        assert shown in text, shown
    assert plan.parameters["generator"] > 0  # generator_ema is not counted twice


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["model.num_samples=64"], "model.num_samples"),  # not one row per class
        (["+model.cfg_options.custom_hooks.NoSuchHook.interval=2"], "model.cfg_options"),
        (["model.cfg_options=null"], "model.cfg_options"),  # BigGAN has no 16 px default blocks
        (["data=synthetic"], "data"),
    ],
)
def test_bad_biggan_settings_fail_in_planning(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as error:
        plan_for(["model=biggan", *overrides])
    assert error.value.key.startswith(key), error.value


def test_conditional_recipe_needs_class_folders(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(flat / "a.png")
    with pytest.raises(ConfigError) as error:
        plan_for(["model=biggan", "data=imagefolder", f"data.root={flat}"])
    assert error.value.key == "data" and "class sub-folders" in str(error.value)


def test_labelled_folder_yields_mmgens_conditional_batch() -> None:
    """LabelledImageFolder, built by MMGen's build_dataset from the composed config: image and
    label of each item, label = the digit (its folder), collated labels of shape (N,)."""
    from mmcv.parallel import collate
    from mmgen.datasets import build_dataset

    from experiments.data.image_files import ensure_digits_pngs

    plan = plan_for(["model=biggan"])
    ensure_digits_pngs(plan.image_root)
    dataset = build_dataset(plan.mmgen_config.data.train)
    assert len(dataset) == 1797
    assert [str(c) for c in range(CLASSES)] == dataset.CLASSES  # folder names, sorted
    items = [dataset[i] for i in (0, 500, 1796)]
    for item in items:
        path = item["meta"].data["img_path"]
        assert int(item["gt_label"]) == int(Path(path).parent.name), path
        assert item["img"].shape == (1, SCALE, SCALE)
        assert float(item["img"].min()) >= -1.0 and float(item["img"].max()) <= 1.0
    batch = collate(items, samples_per_gpu=len(items))
    assert batch["gt_label"].shape == (len(items),) and batch["gt_label"].dtype == torch.int64


# ------------------------------------------------------------------ one trained run


def _run(args: list[str], run_dir: Path) -> None:
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def trained(module_tmp: Callable[[str], Path]) -> Path:
    run_dir = module_tmp("biggan") / "run"
    _run(LEARN, run_dir)
    return run_dir


@pytest.mark.slow
def test_biggan_learns_from_its_untrained_generator(trained: Path, figures) -> None:
    summary = _summary(trained)
    assert (summary["status"], summary["model"]) == ("completed", "biggan")
    metrics = summary["metrics"]
    figures(
        iters=LEARN_ITERS,
        swd_untrained=round(metrics["swd_untrained"], 1),
        swd=round(metrics["swd"], 1),
        ratio=round(metrics["swd"] / metrics["swd_untrained"], 3),
        train_s=metrics["train_seconds"],
        s_per_iter=round(metrics["train_seconds"] / LEARN_ITERS, 4),
    )
    assert metrics["eval_images"] == 128  # SWD of LEARN_ITERS // 2 pairs, not MMGen's 2N
    assert metrics["swd"] < LEARNED * metrics["swd_untrained"]


@pytest.mark.slow
def test_each_grid_row_is_its_class_by_a_digits_classifier(trained: Path, figures) -> None:
    """The final grid (EMA generator, row r = class r): a classifier trained on real digits
    labels its tiles as their rows' classes far above chance; MMGen's training grids have the
    same layout."""
    tiles = _tiles(trained / "training_samples" / "final.png", SCALE)
    assert tiles.shape[:2] == (CLASSES, PER_CLASS)
    for name in (f"iter_{HALF}.png", f"iter_{LEARN_ITERS}.png"):
        assert _tiles(trained / "training_samples" / name, SCALE).shape[:2] == tiles.shape[:2]
    rows = np.repeat(np.arange(CLASSES), PER_CLASS)
    predicted = _digits_classifier().predict(_as_digits(tiles.reshape(-1, SCALE, SCALE)))
    accuracy = float((predicted == rows).mean())
    per_class = [float((predicted[rows == c] == c).mean()) for c in range(CLASSES)]
    figures(accuracy=round(accuracy, 3), chance=1 / CLASSES, per_class=per_class)
    assert accuracy > CONDITIONED


@pytest.mark.slow
def test_samples_come_from_the_ema_generator_which_differs_from_the_raw_one(
    trained: Path,
) -> None:
    """MMGen's checkpoint holds generator and generator_ema (different weights); the final
    grid is the EMA generator's images, drawn as the engine draws them (seed, labels)."""
    from torchvision.utils import save_image

    state = _state(_checkpoint(trained, LEARN_ITERS))
    names = _generator_parameter_names(trained)
    assert names and all(f"generator_ema.{n}" in state for n in names)
    differ = max(
        float((state[f"generator_ema.{n}"] - state[f"generator.{n}"]).abs().max()) for n in names
    )
    assert differ > 1e-4

    model = _model_of(trained)
    model.load_state_dict(state)
    model.eval()
    labels = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    import mmcv

    seed = mmcv.Config.fromfile(str(trained / "mmgen_config.py")).seed  # the run's seed
    pictures = {}
    for which in ("ema", "orig"):
        torch.manual_seed(seed)
        with torch.no_grad():
            images = model(
                None, num_batches=len(labels), label=labels, sample_model=which, return_loss=False
            )
        path = trained.parent / f"{which}.png"
        save_image(((images + 1) / 2).clamp(0, 1), str(path), nrow=PER_CLASS, padding=0)
        pictures[which] = np.asarray(Image.open(path).convert("L"), dtype=np.int16)
    final = np.asarray(Image.open(trained / "training_samples" / "final.png").convert("L"))
    assert np.abs(final.astype(np.int16) - pictures["ema"]).max() <= 1  # PNG rounding
    assert np.abs(final.astype(np.int16) - pictures["orig"]).max() > 32


@pytest.mark.slow
def test_resume_restores_the_generator_and_its_ema(trained: Path, tmp_path: Path) -> None:
    """One more iteration from the half-way checkpoint, with the recipe's own 4 discriminator
    steps per generator step: iteration HALF + 1 trains the discriminator only, so the raw
    generator must stay the saved one exactly, and the EMA hook takes one step from the *saved*
    EMA (a fresh model's EMA is its initial weights): ema' = g + (ema - g) x momentum."""
    saved = _checkpoint(trained, HALF)
    resumed = tmp_path / "resumed"
    _run(
        [
            "model=biggan",
            f"model.iters={HALF + 1}",
            "model.log_interval=1",
            "model.eval_images=0",
            f"model.num_samples={CLASSES}",
            f"resume_from={saved}",
            "model.cfg_options.train_cfg.disc_steps=4",  # (HALF + 1) % 4 != 0
        ],
        resumed,
    )
    assert _summary(resumed)["start"] == "resume_from"
    assert [r["step"] for r in read_jsonl(resumed / "metrics.jsonl")] == [HALF + 1]
    before, after = _state(saved), _state(_checkpoint(resumed, HALF + 1))
    names = _generator_parameter_names(trained)
    assert any(
        not torch.equal(before[f"generator_ema.{n}"], before[f"generator.{n}"]) for n in names
    )
    for name in names:
        raw, ema = before[f"generator.{name}"], before[f"generator_ema.{name}"]
        torch.testing.assert_close(after[f"generator.{name}"], raw, rtol=0, atol=0)
        torch.testing.assert_close(
            after[f"generator_ema.{name}"], raw + (ema - raw) * EMA_MOMENTUM, rtol=1e-5, atol=1e-6
        )
    discriminator = [k for k in before if k.startswith("discriminator.") and k.endswith("_orig")]
    assert any(not torch.equal(before[k], after[k]) for k in discriminator)  # it did train


@pytest.mark.slow
def test_sample_of_a_conditional_ema_model_draws_rows_of_classes_from_the_ema_generator(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    def sample(*arguments: str) -> tuple[np.ndarray, np.ndarray, str]:
        """(grid, labels, stdout) of one call, with --npz."""
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.png"
        code, stdout, err = tool_in_process(
            "sample", [trained, *arguments, "--npz", "--out", out], capsys
        )
        assert code == 0, err
        saved = np.load(out.with_suffix(".npz"))
        sides.add(saved["images"].shape[1])
        return np.asarray(Image.open(out)), saved["labels"], stdout

    sides: set[int] = set()  # the recipe's image side (model.scale)
    grid, labels, stdout = sample("--num", "20")  # 10 classes: one row each, 2 a row
    assert ", ema," in stdout  # the EMA generator by default
    (side,) = sides
    assert grid.shape == (10 * side, 2 * side)
    assert labels.tolist() == [c for c in range(10) for _ in range(2)]
    raw, _, stdout = sample("--num", "20", "--no-ema")
    assert ", generator," in stdout
    assert not np.array_equal(grid, raw)  # same noise and labels, other weights
    # The oracle is not the sampler's own label: MMGen's EMA generator and raw generator,
    # called directly with the same seed and labels, draw exactly the npz images of each call.
    from experiments.gan.evaluate import checkpoint_of, load_model, recorded_plan
    from experiments.gan.quality import seeded
    from experiments.gan.sample import as_uint8

    model, _ = load_model(recorded_plan(trained, []), checkpoint_of(trained, None))
    drawn = {}
    for name in ("generator_ema", "generator"):
        with torch.no_grad(), seeded(0):
            drawn[name] = as_uint8(
                getattr(model, name)(None, num_batches=20, label=torch.as_tensor(labels))
            )
    saved = sorted(tmp_path.glob("*.npz"))
    assert np.array_equal(np.load(saved[0])["images"], drawn["generator_ema"])
    assert np.array_equal(np.load(saved[1])["images"], drawn["generator"])
    _, labels, _ = sample("--num", "6", "--class", "3")
    assert labels.tolist() == [3] * 6
    code, _, err = tool_in_process("sample", [trained, "--class", "10"], capsys)
    assert code == 2 and "--class 10: a class of the model: 0..9" in err


@pytest.mark.slow
def test_an_export_of_the_ema_generator_samples_the_same_png_bytes(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """experiments-export of a GAN run: the EMA generator by default (--no-ema: the raw
    one), a plain state dict in MMGen's key layout that MMGen's own builder takes strictly;
    experiments-sample FILE draws the same PNG bytes as the run's checkpoint, seed for seed."""
    from experiments.gan.mmgen_compat import install_ada_stub

    install_ada_stub()  # PyPI's mmgen lacks stylegan/ada/, which mmgen.models imports
    from mmgen.models import build_module

    exports = {}
    for ema in ("true", "false"):
        out = tmp_path / f"generator_{ema}.pt"
        flag = "--ema" if ema == "true" else "--no-ema"
        code, _, err = tool_in_process("export", [trained, "--out", out, flag], capsys)
        assert code == 0, err
        exports[ema] = out
        sidecar = json.loads(out.with_name(out.name + ".json").read_text())
        assert (sidecar["family"], sidecar["ema"], sidecar["run_dir"]) == (
            "gan",
            ema == "true",
            str(trained),
        )
        generator = build_module(sidecar["generator"])  # MMGen's builder, our file
        generator.load_state_dict(torch.load(out, weights_only=True), strict=True)
    code, _, err = tool_in_process("export", [trained, "--out", tmp_path / "x.pt"], capsys)
    assert code == 0 and json.loads((tmp_path / "x.pt.json").read_text())["ema"] is True

    def png(target: Path, *arguments: str) -> bytes:
        out = tmp_path / f"sample_{len(list(tmp_path.glob('sample_*')))}.png"
        argv = [target, "--num", 20, "--seed", 5, *arguments, "--out", out]
        code, _, err = tool_in_process("sample", argv, capsys)
        assert code == 0, err
        return out.read_bytes()

    assert png(exports["true"]) == png(trained)  # EMA, as the run samples by default
    assert png(exports["false"]) == png(trained, "--no-ema")
    assert png(exports["true"]) != png(exports["false"])
    code, _, err = tool_in_process("sample", [exports["true"], "--no-ema"], capsys)
    assert code == 2 and "holds the EMA generator only" in err
