"""`experiments-sample` and `experiments-eval` on a GAN run, and the CPU run's own notice.

Budget: one tiny dcgan run on the session's image folder (colour, 40 train and 40 val images;
20 iterations, a checkpoint every 10) serves every test. Every call goes through the tools'
entry functions in this process (their imports, about 5 s a process, would otherwise
dominate); the installed console scripts run as real processes on a dcgan run in
test_gpu_check.py's rehearsal (its eval_gan and sample_gan checks).
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

from .conftest import run_cli, tool_in_process

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
    run: tuple[Path, str], capsys: pytest.CaptureFixture
) -> None:
    run_dir, _ = run
    code, out, err = tool_in_process("eval", [run_dir], capsys)
    assert code == 0, err[-3000:]
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
    assert f"the run recorded {final['swd']:.4f}" in out
    assert "eval.json" in out


def test_eval_of_an_older_checkpoint_on_other_data(
    run: tuple[Path, str], capsys: pytest.CaptureFixture
) -> None:
    run_dir, _ = run
    final = json.loads((run_dir / "summary.json").read_text())["metrics"]
    older = _checkpoint(run_dir, 10)
    code, out, err = tool_in_process(
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
    code, out, err = tool_in_process("eval", [run_dir, argument], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: invalid config: {key}=") and err.count("\n") == 1, err
    after = (run_dir / "eval.json").read_bytes() if (run_dir / "eval.json").exists() else None
    assert after == before


def test_sample_writes_a_grid_and_the_images_of_the_newest_checkpoint(
    run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir, _ = run
    out = tmp_path / "grid.png"
    arguments = [run_dir, "--num", "12", "--seed", "5", "--npz", "--out", out]
    code, stdout, err = tool_in_process("sample", arguments, capsys)
    assert code == 0, err[-3000:]
    assert f"iteration {ITERS}" in stdout
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
        code, stdout, err = tool_in_process(
            "sample", [target, "--num", 8, "--seed", seed, "--out", out], capsys
        )
        assert code == 0, err
        drawn[name] = out
    assert "iteration 10" in stdout  # the last call: the checkpoint named
    assert drawn["first"].read_bytes() == drawn["again"].read_bytes()
    # Without --out: <run dir>/samples/, named after the checkpoint, seed and count.
    code, stdout, err = tool_in_process("sample", [run_dir, "--num", "8", "--seed", "3"], capsys)
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
    code, out, err = tool_in_process("sample", [run_dir, *arguments], capsys)
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    last = lines[-1].removeprefix("experiments-sample: ")  # argparse names the tool first
    assert last.startswith(said) and (len(lines) == 1 or lines[0].startswith("usage:")), err
    assert not list(tmp_path.iterdir())
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before


def test_an_export_evaluates_to_the_runs_quality_and_ema_is_refused_without_one(
    run: tuple[Path, str], tmp_path: Path, capsys
) -> None:
    """dcgan trains no EMA generator: --ema is refused in one line (exit 2, nothing
    written); its export evaluates (experiments-eval FILE) to the checkpoint's SWD."""
    run_dir, _ = run
    code, out, err = tool_in_process("export", [run_dir, "--ema"], capsys)
    assert (code, out) == (2, "") and "model=dcgan trains no EMA generator" in err, err
    assert not (run_dir / "export").exists()
    exported = tmp_path / "dcgan.pt"
    code, _, err = tool_in_process("export", [run_dir, "--out", exported], capsys)
    assert code == 0, err
    code, _, err = tool_in_process("eval", [_checkpoint(run_dir, ITERS)], capsys)
    assert code == 0, err
    from_checkpoint = json.loads((run_dir / "eval.json").read_text())
    code, _, err = tool_in_process("eval", [exported], capsys)
    assert code == 0, err
    from_export = json.loads((run_dir / "eval.json").read_text())
    assert from_export["checkpoint"] == str(exported) and from_export["iteration"] == ITERS
    assert from_export["metrics"] == from_checkpoint["metrics"]
    torn = tmp_path / "torn.pt"  # cut short, its sidecar intact
    torn.write_bytes(exported.read_bytes()[:200])
    torn.with_name("torn.pt.json").write_text(exported.with_name("dcgan.pt.json").read_text())
    code, out, err = tool_in_process("sample", [torn, "--out", tmp_path / "torn.png"], capsys)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "a readable export (" in err and not (tmp_path / "torn.png").exists()
