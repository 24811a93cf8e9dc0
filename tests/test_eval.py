"""`experiments-eval`: a run's checkpoint evaluated from its own record.

One tiny real run (6 steps, a checkpoint every 3) serves every test; the topology runs in
test_topologies.py check that sharded (FSDP2 x TP, PP x DDP) checkpoints reproduce their
run's final validation numbers. The first test runs the installed console script as a user
does; the others call its main() in this process (`tool_in_process`: eval trains nothing, and
each process start-up costs ~3 s of torch and SpikingJelly imports).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.snn.engines.spikingjelly_checkpoints import read_shard

from .conftest import SharedRuns, run_cli, run_tool, tool_in_process
from .test_classify import SHARED as CLASSIFY_RUN
from .test_classify import TINY as CLASSIFY_TINY

pytestmark = pytest.mark.slow

RUN = [
    "trainer.max_steps=6",
    "trainer.checkpoint_interval=3",
    "trainer.keep_checkpoints=3",
    "data.val_size=128",
    "model.time_steps=2",
    "logger=none",
]


@pytest.fixture(scope="module")
def run_dir(module_tmp: Callable[[str], Path]) -> Path:
    root = module_tmp("eval")
    result = run_cli([*RUN, f"hydra.run.dir={root / 'run'}"], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run"


def evaluate(run_dir: Path, *args: str) -> tuple[int, str, str]:
    """The installed experiments-eval, in a process of its own."""
    result = run_tool("experiments-eval", [*map(str, args)], cwd=run_dir.parent)
    return result.returncode, result.stdout, result.stderr


def evaluate_here(capsys: pytest.CaptureFixture, *args: str | Path) -> tuple[int, str, str]:
    """experiments-eval's main() in this process: (exit status, stdout, stderr)."""
    return tool_in_process("eval", list(args), capsys)


@pytest.mark.smoke
def test_eval_of_a_run_reproduces_its_final_validation_and_draws_the_confusion_matrix(
    run_dir: Path,
) -> None:
    code, out, err = evaluate(run_dir, run_dir)
    assert code == 0, err
    record = json.loads((run_dir / "eval.json").read_text())
    final = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert record["step"] == 6
    assert record["checkpoint"].endswith("step_00000006")
    assert abs(record["val_accuracy"] - final["val_accuracy"]) <= 1e-6
    assert abs(record["val_loss"] - final["val_loss"]) <= 1e-5 * final["val_loss"]
    confusion = record["confusion_matrix"]
    assert len(confusion) == 10 and sum(map(sum, confusion)) == record["images"] == 128
    correct = sum(confusion[k][k] for k in range(10))
    assert correct / 128 == pytest.approx(record["val_accuracy"])
    # Rows are the true classes: each row holds as many images as the validation data has of
    # that class, counted here from the data itself (the diagonal and the accuracy above come
    # from the same predictions and cannot tell a transposed matrix from the right one).
    import torch

    from experiments.data import import_object

    from .conftest import plan_for

    config = plan_for(RUN).training_config
    _, val = import_object(config.dataset_builder, "data.builder")(**config.dataset_kwargs)
    labels = torch.tensor([int(val[i][1]) for i in range(len(val))])
    assert [sum(row) for row in confusion] == torch.bincount(labels, minlength=10).tolist()
    per_class = record["per_class_accuracy"]
    assert [p for p in per_class if p is not None] == [
        pytest.approx(row[k] / sum(row)) for k, row in enumerate(confusion) if sum(row)
    ]
    assert record["images_per_second"] > 0
    from matplotlib.image import imread

    assert imread(run_dir / "eval_confusion.png").shape[0] > 200
    assert "val_accuracy" in out and "eval.json" in out


def test_a_checkpoint_path_evaluates_that_checkpoint_and_data_can_be_overridden(
    run_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    older = run_dir / "checkpoints" / "step_00000003"
    code, _, err = evaluate_here(capsys, older, "data.val_size=32", "trainer.batch_size=16")
    assert code == 0, err
    record = json.loads((run_dir / "eval.json").read_text())
    assert (record["step"], record["images"]) == (3, 32)
    assert record["data"]["val_size"] == 32


def test_an_unreadable_newest_checkpoint_falls_back_to_the_previous_one(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (data,) = (copy / "checkpoints" / "step_00000006" / "pp_0000_tp_0000").glob("*.distcp")
    data.write_bytes(data.read_bytes()[:1000])  # a torn write
    code, _, err = evaluate_here(capsys, copy)
    assert code == 0, err
    assert "cannot load" in err and "step_00000006" in err
    assert json.loads((copy / "eval.json").read_text())["step"] == 3


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["model.depth=34"], "model.depth"),
        (["data.colour=3"], "data.colour"),
        (["val_size"], "val_size"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    run_dir: Path, tmp_path: Path, args: list[str], named: str
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("eval*"))
    code, _, err = evaluate(copy, copy, *args)
    assert code == 2
    lines = err.strip().splitlines()  # one line, or argparse's usage and one error line
    last = lines[-1].removeprefix("experiments-eval: ")
    assert last.startswith("error:") and named in last, err
    assert len(lines) == 1 or (len(lines) == 2 and lines[0].startswith("usage:")), err
    assert not (copy / "eval.json").exists() and not (copy / "eval_confusion.png").exists()


def test_a_path_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    code, _, err = evaluate(tmp_path, tmp_path)
    assert code == 2 and "a run directory made by experiments-train" in err
    code, _, err = evaluate(tmp_path, tmp_path / "missing")
    assert code == 2 and "run=" in err


def test_eval_of_a_classic_trainer_run_reproduces_its_validation(
    shared_runs: SharedRuns, capsys: pytest.CaptureFixture
) -> None:
    """trainer=classify keeps the Trainer's own .pth files; eval reads the latest one and
    scores it with the Trainer's criterion (label smoothing), reproducing the run's numbers.
    The run is test_classify.py's tiny one (the session's, conftest.SharedRuns): one epoch
    of 64 images in batches of 32, 32 validation images."""
    run_dir = shared_runs.get(CLASSIFY_RUN, CLASSIFY_TINY)
    code, _, err = evaluate_here(capsys, run_dir)
    assert code == 0, err
    record = json.loads((run_dir / "eval.json").read_text())
    final = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert record["checkpoint"].endswith("checkpoint_latest.pth")
    assert record["step"] == final["steps"] == 2
    assert abs(record["val_accuracy"] - final["val_accuracy"]) <= 1e-6
    assert abs(record["val_loss"] - final["val_loss"]) <= 1e-5 * final["val_loss"]
    # The Trainer's spike measurement (its own preprocessing and readout, after its last
    # evaluation) is eval's on the same checkpoint: every layer's counts, the MACs and ACs.
    (trained,) = json.loads((run_dir / "spikes.json").read_text())["evaluations"]
    measured = record["spikes"]
    assert trained["images"] == measured["images"] == 32
    assert trained["layers"] == measured["layers"] and len(trained["layers"]) == 20
    for key in ("firing_rate", "synops_per_image", "macs_per_image", "acs_per_image"):
        assert trained[key] == pytest.approx(measured[key], rel=1e-6), key
    assert final["energy_per_image_mj"] == trained["energy_per_image_mj"]


def test_export_writes_one_file_that_eval_takes_and_refuses_bad_input(
    run_dir: Path, tmp_path: Path, capsys
) -> None:
    """experiments-export of the run: <run>/export/<model>-step<N>.pt and its sidecar; a plain
    state dict; moved away from the run, experiments-eval still evaluates it to the run's
    numbers. Bad input: one line, exit 2, nothing written."""
    import torch

    from experiments.export import main as export_main

    def export(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exited:
            sys.argv = ["experiments-export", *args]
            export_main()
        out = capsys.readouterr()
        return exited.value.code, out.out, out.err

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("eval*", "export"))
    code, out, err = export(str(copy))
    assert code == 0, err
    exported = copy / "export" / "sew_resnet18-step6.pt"
    assert f"Exported {exported}" in out
    state = torch.load(exported, map_location="cpu", weights_only=True)
    shard = read_shard(copy / "checkpoints" / "step_00000006" / "pp_0000_tp_0000")["model"]
    assert set(state) == set(shard)
    assert all(torch.equal(state[k], shard[k]) for k in state)  # the checkpoint's weights
    moved = tmp_path / "elsewhere" / "model.pt"
    moved.parent.mkdir()
    shutil.move(exported, moved)
    shutil.move(f"{exported}.json", f"{moved}.json")
    code, _, err = evaluate_here(capsys, moved)
    assert code == 0, err
    record = json.loads((copy / "eval.json").read_text())
    final = json.loads((copy / "summary.json").read_text())["metrics"]
    assert record["checkpoint"] == str(moved) and record["step"] == 6
    assert abs(record["val_accuracy"] - final["val_accuracy"]) <= 1e-6

    (torn,) = (copy / "checkpoints" / "step_00000003" / "pp_0000_tp_0000").glob("*.distcp")
    torn.write_bytes(torn.read_bytes()[:1000])
    torn = torn.parent  # the step folder below
    for args, said in (
        ([str(copy), "--ema"], "error: --ema: left out: an SNN run's checkpoints"),
        ([str(moved)], "not an export"),
        ([str(torn.parent)], "step_00000003"),
        ([str(tmp_path / "elsewhere")], "a run directory made by experiments-train"),
    ):
        code, out, err = export(*args)
        assert code == 2, (args, out, err)
        assert err.startswith("error:") and err.strip().count("\n") == 0 and said in err, err
    # argparse's answers: its usage, then one error line (a bare call: the same, exit 2)
    for args, said in (
        ([str(copy), "epochs=3"], "error: unrecognized arguments: epochs=3"),
        ([], "error: the following arguments are required: RUN_DIR|CHECKPOINT"),
    ):
        code, out, err = export(*args)
        lines = err.strip().splitlines()
        assert (code, out) == (2, "") and lines[0].startswith("usage: experiments-export")
        assert lines[-1] == f"experiments-export: {said}", err
    assert list((copy / "export").iterdir()) == []  # (moved away above) none written since


def _as_retired_cpu_engine_run(run_dir: Path, copy: Path) -> None:
    """The run as our retired CPU engine left one: its step folders hold one
    `pp_XXXX_tp_YYYY.pt` shard ({"model": ...}) and meta.json, its summary names `cpu`."""
    import torch

    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("eval*", "export", "checkpoints"))
    for step in (3, 6):
        library = run_dir / "checkpoints" / f"step_{step:08d}"
        folder = copy / "checkpoints" / library.name
        folder.mkdir(parents=True)
        torch.save(
            {"model": read_shard(library / "pp_0000_tp_0000")["model"]},
            folder / "pp_0000_tp_0000.pt",
        )
        recipe = json.loads((library / "config.json").read_text())
        meta = {"step": step, "recipe": recipe, "mesh": {"shape": [1, 1, 1]}}
        (folder / "meta.json").write_text(json.dumps(meta))
    summary = json.loads((copy / "summary.json").read_text())
    (copy / "summary.json").write_text(json.dumps({**summary, "engine": "cpu"}))


def test_a_retired_cpu_engine_run_is_refused_on_resume_and_still_evaluated_and_exported(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Resuming a run our retired CPU engine recorded is refused before launch, one line
    naming the engine and what to do, nothing written; experiments-eval and experiments-export
    still read its checkpoints (to the numbers the run recorded)."""
    from .conftest import run_cli_in_process

    copy = tmp_path / "run"
    _as_retired_cpu_engine_run(run_dir, copy)
    before = sorted((p.relative_to(copy), p.stat().st_mtime_ns) for p in copy.rglob("*"))
    result = run_cli_in_process([*RUN, f"hydra.run.dir={copy}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid config: trainer.engine='cpu': ")
    assert "records a run trained by our CPU engine, which is gone" in line
    assert "experiments-eval and experiments-export still read them" in line
    assert "resume=null retrains this run in its directory" in line
    assert sorted((p.relative_to(copy), p.stat().st_mtime_ns) for p in copy.rglob("*")) == before

    code, _, err = evaluate_here(capsys, copy)
    assert code == 0, err
    record = json.loads((copy / "eval.json").read_text())
    final = json.loads((copy / "summary.json").read_text())["metrics"]
    assert record["checkpoint"].endswith("step_00000006") and record["engine"] == "cpu"
    assert abs(record["val_accuracy"] - final["val_accuracy"]) <= 1e-6
    code, _, err = tool_in_process("export", [copy], capsys)
    assert code == 0, err[-2000:]
    assert (copy / "export" / "sew_resnet18-step6.pt").is_file()
