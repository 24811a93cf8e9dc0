"""`experiments-sample` and `experiments-eval` on a GAN run, and the CPU run's own notice.

Budget: one tiny dcgan run on the session's image folder (colour, 40 train and 40 val images;
20 iterations, a checkpoint every 10) serves every test. Each console script runs once as a
real process; the other calls go through the same entry functions in this process (their
imports, about 5 s a process, would otherwise dominate).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .conftest import run_cli, run_tool

pytestmark = [pytest.mark.gan, pytest.mark.slow]

ITERS = 20
RUN = [
    "model=dcgan",
    "data=imagefolder",
    f"model.iters={ITERS}",
    "model.batch_size=16",
    "model.log_interval=10",
    "model.checkpoint_interval=10",
    f"model.sample_interval={ITERS}",
    "model.num_samples=16",
    "model.eval_images=64",  # the folder holds 40: quality uses all 40
    "logger=none",
]


@pytest.fixture(scope="module")
def run(module_tmp: Callable[[str], Path], imagefolder_session: Path) -> tuple[Path, str]:
    """(run directory, the training command's stdout)."""
    root = module_tmp("gan_sample_eval")
    run_dir = root / "run"
    result = run_cli(
        [*RUN, f"data.root={imagefolder_session}", f"hydra.run.dir={run_dir}"], cwd=root
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return run_dir, result.stdout


def _checkpoint(run_dir: Path, iteration: int) -> Path:
    return run_dir / "ckpt" / run_dir.name / f"iter_{iteration}.pth"


def _main(module: str, argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """A console script's main() in this process: (exit status, stdout, stderr)."""
    import sys

    if module == "sample":
        from experiments.gan.sample import main
    elif module == "export":
        from experiments.export import main
    else:
        from experiments.evaluate import main
    saved = sys.argv
    sys.argv = [f"experiments-{module}", *map(str, argv)]
    try:
        with pytest.raises(SystemExit) as stop:
            main()
    finally:
        sys.argv = saved
    out, err = capsys.readouterr()
    return int(stop.value.code or 0), out, err


def test_a_cpu_run_says_cpu_training_is_for_debugging_with_its_speed(
    run: tuple[Path, str],
) -> None:
    _, stdout = run
    notes = [line for line in stdout.splitlines() if "CPU training is for debugging" in line]
    assert len(notes) == 1, stdout
    measured = re.search(
        r"on the CPU at (\d+\.\d+) s/iter \(measured over 10 iterations\)", notes[0]
    )
    assert measured and float(measured.group(1)) > 0, notes[0]


def test_eval_reproduces_the_runs_final_metrics_from_its_newest_checkpoint(
    run: tuple[Path, str],
) -> None:
    run_dir, _ = run
    result = run_tool("experiments-eval", [str(run_dir)], cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((run_dir / "eval.json").read_text())
    final = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert record["iteration"] == ITERS
    assert record["checkpoint"] == str(_checkpoint(run_dir, ITERS))
    assert record["generator"] == "generator"  # dcgan trains no EMA
    metrics = record["metrics"]
    # The same checkpoint, images (40: the whole folder), seed and code as the run's end.
    assert metrics["eval_images"] == final["eval_images"] == 40
    assert metrics["swd"] == pytest.approx(final["swd"], rel=1e-6)
    assert metrics["ms_ssim"] == pytest.approx(final["ms_ssim"], rel=1e-6)
    assert record["data"]["image_root"].endswith("/train")
    assert "VGG16" in record["not_computed"]["precision_recall"]
    assert f"the run recorded {final['swd']:.4f}" in result.stdout
    assert "eval.json" in result.stdout


def test_eval_of_an_older_checkpoint_on_other_data(
    run: tuple[Path, str], capsys: pytest.CaptureFixture
) -> None:
    run_dir, _ = run
    final = json.loads((run_dir / "summary.json").read_text())["metrics"]
    older = _checkpoint(run_dir, 10)
    code, out, err = _main(
        "eval", [older, "data.train_subdirectory=val", "model.eval_images=20"], capsys
    )
    assert code == 0, err
    record = json.loads((run_dir / "eval.json").read_text())
    assert (record["iteration"], record["checkpoint"]) == (10, str(older))
    assert record["data"]["image_root"].endswith("/val")
    assert record["metrics"]["eval_images"] == 20
    assert np.isfinite(record["metrics"]["swd"]) and record["metrics"]["swd"] != final["swd"]
    assert "the run recorded" not in out  # not comparable: other checkpoint, data, count


@pytest.mark.parametrize(
    ("argument", "key"),
    [
        ("model.iters=5", "model.iters"),  # the generator is the run's
        ("data.no_such_key=1", "data.no_such_key"),
        ("data=no_such_data", "data"),
    ],
)
def test_eval_refuses_what_it_cannot_change_in_one_line(
    run: tuple[Path, str], argument: str, key: str, capsys: pytest.CaptureFixture
) -> None:
    run_dir, _ = run
    before = (run_dir / "eval.json").read_bytes() if (run_dir / "eval.json").exists() else None
    code, out, err = _main("eval", [run_dir, argument], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: invalid config: {key}=") and err.count("\n") == 1, err
    after = (run_dir / "eval.json").read_bytes() if (run_dir / "eval.json").exists() else None
    assert after == before


def test_sample_writes_a_grid_and_the_images_of_the_newest_checkpoint(
    run: tuple[Path, str], tmp_path: Path
) -> None:
    run_dir, _ = run
    out = tmp_path / "grid.png"
    result = run_tool(
        "experiments-sample",
        [str(run_dir), "--num", "12", "--seed", "5", "--npz", "--out", str(out)],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"iteration {ITERS}" in result.stdout
    saved = np.load(out.with_suffix(".npz"))
    images = saved["images"]
    assert images.shape == (12, 32, 32, 3) and images.dtype == np.uint8
    grid = np.asarray(Image.open(out))
    per_row = math.ceil(math.sqrt(12))  # 4 a row, 3 rows: the training grids' layout
    assert grid.shape == (3 * 32, per_row * 32, 3)
    for index, image in enumerate(images):  # the PNG shows exactly the saved images
        row, column = divmod(index, per_row)
        assert np.array_equal(
            grid[row * 32 : (row + 1) * 32, column * 32 : (column + 1) * 32], image
        )
    assert images.std() > 1  # not a blank canvas


def test_sample_is_seeded_and_a_checkpoint_path_picks_that_checkpoint(
    run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir, _ = run
    drawn = {}
    for name, target, seed in (
        ("first", run_dir, 3),
        ("again", run_dir, 3),
        ("other_seed", run_dir, 4),
        ("older", _checkpoint(run_dir, 10), 3),
    ):
        out = tmp_path / f"{name}.png"
        code, stdout, err = _main(
            "sample", [target, "--num", 8, "--seed", seed, "--out", out], capsys
        )
        assert code == 0, err
        drawn[name] = out
    assert "iteration 10" in stdout  # the last call: the checkpoint named
    assert drawn["first"].read_bytes() == drawn["again"].read_bytes()
    # Without --out: <run dir>/samples/, named after the checkpoint, seed and count.
    code, stdout, err = _main("sample", [run_dir, "--num", "8", "--seed", "3"], capsys)
    assert code == 0, err
    default = run_dir / "samples" / f"iter_{ITERS}_seed_3_num_8.png"
    assert str(default) in stdout
    assert default.read_bytes() == drawn["first"].read_bytes()
    pixels = {name: np.asarray(Image.open(path)) for name, path in drawn.items()}
    assert not np.array_equal(pixels["first"], pixels["other_seed"])
    assert not np.array_equal(pixels["first"], pixels["older"])  # same noise, other weights


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--class", "3"], "error: --class 3: left out: dcgan"),  # not class-conditional
        (["--ema"], "error: --ema: --no-ema or left out"),  # dcgan trains no EMA generator
        (["--num", "0"], "error: argument --num: 0: an integer >= 1"),
        (["--nmu", "4"], "error: unrecognized arguments: --nmu 4"),
        (["--out", "grid.jpg"], "error: --out grid.jpg: a file name ending in .png"),
        (["--seed", "-1"], "error: argument --seed: -1: an integer >= 0"),
        (["num=4"], "error: unrecognized arguments: num=4"),  # the old key=value spelling
    ],
)
def test_sample_refuses_bad_arguments_in_one_line_and_writes_nothing(
    run: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    arguments: list[str],
    said: str,
) -> None:
    """Our own checks are one line; argparse's (a flag's type, an unknown flag) are its usage
    and one error line, as every experiments-* tool answers."""
    run_dir, _ = run
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    if "--out" not in arguments:
        arguments = [*arguments, "--out", str(tmp_path / "grid.png")]
    code, out, err = _main("sample", [run_dir, *arguments], capsys)
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    last = lines[-1].removeprefix("experiments-sample: ")  # argparse names the tool first
    assert last.startswith(said) and (len(lines) == 1 or lines[0].startswith("usage:")), err
    assert not list(tmp_path.iterdir())
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before


@pytest.fixture(scope="module")
def conditional_run(module_tmp: Callable[[str], Path]) -> Path:
    """BigGAN (class-conditional, EMA generator) on the digits, a few iterations."""
    root = module_tmp("gan_sample_conditional")
    run_dir = root / "run"
    args = [
        "model=biggan",
        "model.iters=4",
        "model.batch_size=8",
        "model.log_interval=4",
        "model.checkpoint_interval=4",
        "model.sample_interval=4",
        "model.num_samples=10",
        "model.eval_images=0",  # no quality metric is read here
        "logger=none",
        f"hydra.run.dir={run_dir}",
    ]
    result = run_cli(args, cwd=root)
    assert result.returncode == 0, result.stderr[-4000:]
    return run_dir


def test_sample_of_a_conditional_ema_model_draws_rows_of_classes_from_the_ema_generator(
    conditional_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    def sample(*arguments: str) -> tuple[np.ndarray, np.ndarray, str]:
        """(grid, labels, stdout) of one call, with --npz."""
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.png"
        code, stdout, err = _main(
            "sample", [conditional_run, *arguments, "--npz", "--out", out], capsys
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
    import torch

    from experiments.gan.evaluate import checkpoint_of, load_model, recorded_plan
    from experiments.gan.quality import seeded
    from experiments.gan.sample import as_uint8

    model, _ = load_model(recorded_plan(conditional_run, []), checkpoint_of(conditional_run, None))
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
    code, _, err = _main("sample", [conditional_run, "--class", "10"], capsys)
    assert code == 2 and "--class 10: a class of the model: 0..9" in err


def test_an_export_of_the_ema_generator_samples_the_same_png_bytes(
    conditional_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """experiments-export of a GAN run: the EMA generator by default (--no-ema: the raw
    one), a plain state dict in MMGen's key layout that MMGen's own builder takes strictly;
    experiments-sample FILE draws the same PNG bytes as the run's checkpoint, seed for seed."""
    import torch

    from experiments.gan.mmgen_compat import install_ada_stub

    install_ada_stub()  # PyPI's mmgen lacks stylegan/ada/, which mmgen.models imports
    from mmgen.models import build_module

    exports = {}
    for ema in ("true", "false"):
        out = tmp_path / f"generator_{ema}.pt"
        flag = "--ema" if ema == "true" else "--no-ema"
        code, _, err = _main("export", [conditional_run, "--out", out, flag], capsys)
        assert code == 0, err
        exports[ema] = out
        sidecar = json.loads(out.with_name(out.name + ".json").read_text())
        assert (sidecar["family"], sidecar["ema"], sidecar["run_dir"]) == (
            "gan",
            ema == "true",
            str(conditional_run),
        )
        generator = build_module(sidecar["generator"])  # MMGen's builder, our file
        generator.load_state_dict(torch.load(out, weights_only=True), strict=True)
    code, _, err = _main("export", [conditional_run, "--out", tmp_path / "x.pt"], capsys)
    assert code == 0 and json.loads((tmp_path / "x.pt.json").read_text())["ema"] is True

    def png(target: Path, *arguments: str) -> bytes:
        out = tmp_path / f"sample_{len(list(tmp_path.glob('sample_*')))}.png"
        code, _, err = _main("sample", [target, "--num", 20, "--seed", 5, *arguments, "--out", out],
                             capsys)  # fmt: skip
        assert code == 0, err
        return out.read_bytes()

    assert png(exports["true"]) == png(conditional_run)  # EMA, as the run samples by default
    assert png(exports["false"]) == png(conditional_run, "--no-ema")
    assert png(exports["true"]) != png(exports["false"])
    code, _, err = _main("sample", [exports["true"], "--no-ema"], capsys)
    assert code == 2 and "holds the EMA generator only" in err


def test_an_export_evaluates_to_the_runs_quality_and_ema_is_refused_without_one(
    run: tuple[Path, str], tmp_path: Path, capsys
) -> None:
    """dcgan trains no EMA generator: --ema is refused in one line (exit 2, nothing
    written); its export evaluates (experiments-eval FILE) to the checkpoint's SWD."""
    run_dir, _ = run
    code, out, err = _main("export", [run_dir, "--ema"], capsys)
    assert (code, out) == (2, "") and "model=dcgan trains no EMA generator" in err, err
    assert not (run_dir / "export").exists()
    exported = tmp_path / "dcgan.pt"
    code, _, err = _main("export", [run_dir, "--out", exported], capsys)
    assert code == 0, err
    code, _, err = _main("eval", [_checkpoint(run_dir, ITERS)], capsys)
    assert code == 0, err
    from_checkpoint = json.loads((run_dir / "eval.json").read_text())
    code, _, err = _main("eval", [exported], capsys)
    assert code == 0, err
    from_export = json.loads((run_dir / "eval.json").read_text())
    assert from_export["checkpoint"] == str(exported) and from_export["iteration"] == ITERS
    assert from_export["metrics"] == from_checkpoint["metrics"]
    torn = tmp_path / "torn.pt"  # cut short, its sidecar intact
    torn.write_bytes(exported.read_bytes()[:200])
    torn.with_name("torn.pt.json").write_text(exported.with_name("dcgan.pt.json").read_text())
    code, out, err = _main("sample", [torn, "--out", tmp_path / "torn.png"], capsys)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "a readable export (" in err and not (tmp_path / "torn.png").exists()
