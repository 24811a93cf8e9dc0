"""What a user meets on day one: --help, --version, presets, reports of a single run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import (
    BIN,
    FAST_SINGLE,
    SLURM_FSDP2_TP,
    SharedRuns,
    read_jsonl,
    run_cli,
    run_cli_in_process,
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["+trainer.epoch=3", "data=synthetic"],  # a refusal: one line on stderr, exit 2
        ["trainer.epoch=3", "data=synthetic"],  # Hydra's composition error, as our one line
        ["-m", "optimizer.lr=1e-3,2e-3", "dry_run=true"],  # a sweep's dry run: the plans
    ],
)
def test_the_entry_point_in_process_answers_as_the_console_script(
    args: list[str], tmp_path: Path
) -> None:
    """Refusal and planning tests call the entry point in-process (run_cli_in_process, no
    process start-up); the installed console script, started as a user starts it, must give
    the same exit status, stdout and stderr, byte for byte."""
    args = [*args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    real = run_cli(args, cwd=tmp_path)
    here = run_cli_in_process(args, cwd=tmp_path)
    assert (here.returncode, here.stdout, here.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )
    assert real.returncode in (0, 2) and (real.stdout or real.stderr)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_help_is_our_page(tmp_path: Path) -> None:
    result = run_cli_in_process(["--help"], cwd=tmp_path)
    assert result.returncode == 0
    out = result.stdout
    assert out.startswith("experiments-train: compose, check and launch")
    for group in ("model:", "topology:", "launcher:", "data:", "optimizer:", "trainer:"):
        assert group in out
    assert "sew_resnet18" in out and "channel_tp" in out and "slurm" in out
    assert "dry_run=false|true|json" in out and "resume=auto|null|<dir>" in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_version_names_the_app_and_its_libraries(tmp_path: Path) -> None:
    from experiments import __version__

    result = run_cli(["--version"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"experiments-train {__version__} (torch ")
    assert "spikingjelly 2.0.0" in result.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("group", ["experiment", "hparams_search"])
def test_plus_on_a_preset_group_says_to_drop_the_plus(group: str, tmp_path: Path) -> None:
    name = "digits_sew_resnet18" if group == "experiment" else "digits_lr"
    result = run_cli_in_process([f"+{group}={name}", "dry_run=true"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: write {group}=<name>, without '+': the {group} group is already in the "
        "defaults list (conf/train.yaml), so '+' would add it a second time"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_preset_whose_data_root_is_required_can_be_dry_run(tmp_path: Path) -> None:
    preset = ["experiment=sew_resnet34_imagenet", *SLURM_FSDP2_TP]  # 4 Slurm nodes of 8 GPUs
    result = run_cli_in_process([*preset, "dry_run=true"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "mesh dp=16 x pp=1 x tp=2" in result.stdout
    assert "<required: set data.root=... before a real run>" in result.stdout
    real = run_cli_in_process(preset, cwd=tmp_path)  # without dry_run the root is required
    assert real.returncode == 2
    assert "data.root='???': must be set" in real.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.smoke  # the SNN family's tiny real run in `make check`
def test_a_short_run_logs_its_last_step_and_reports_as_a_single_run(
    shared_runs: SharedRuns, tmp_path: Path
) -> None:
    """The session's FAST_SINGLE run: 4 steps."""
    run_dir = shared_runs.get("fast_single", FAST_SINGLE)
    # log_every_n_steps is 10: the last step is logged anyway, so the loss panel is not empty
    assert [r["step"] for r in read_jsonl(run_dir / "steps.jsonl")] == [4]
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    report = subprocess.run(
        [str(BIN / "experiments-report"), str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith(f"Run {run_dir}: completed (sew_resnet18 on synthetic")
    assert "val_accuracy" in report.stdout and "steps         4" in report.stdout
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before  # wrote nothing
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = subprocess.run(
        [str(BIN / "experiments-report"), str(empty)], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2
    assert "neither a sweep directory" in refused.stderr
    assert list(empty.iterdir()) == []


@pytest.mark.slow
def test_a_completed_runs_record_is_never_rewritten_except_by_an_extension(
    shared_runs: SharedRuns, tmp_path: Path
) -> None:
    """A copy of the session's FAST_SINGLE run (4 steps, checkpointed at 4), run again."""
    run_dir = tmp_path / "run"
    SharedRuns.copy(shared_runs.get("fast_single", FAST_SINGLE), run_dir)
    base = [*FAST_SINGLE, f"hydra.run.dir={run_dir}"]
    recorded = (run_dir / ".hydra" / "config.yaml").read_text()
    summary = (run_dir / "summary.json").read_text()

    changed = run_cli([*base, "optimizer.lr=0.5"], cwd=tmp_path)
    assert changed.returncode == 2
    [line] = changed.stderr.strip().splitlines()
    assert line.startswith("error: invalid config: optimizer.lr=0.5: ")
    assert "recorded with optimizer.lr=0.001" in line and "(keys that differ: optimizer.lr)" in line
    assert (run_dir / ".hydra" / "config.yaml").read_text() == recorded
    assert (run_dir / "summary.json").read_text() == summary

    # FAST is 1 epoch of 4 steps: both limits are raised to reach step 6
    extended = run_cli([*base, "trainer.epochs=2", "trainer.max_steps=6"], cwd=tmp_path)
    assert extended.returncode == 0, extended.stderr[-3000:]
    assert "Extending" in extended.stdout
    record = json.loads((run_dir / "summary.json").read_text())
    assert record["status"] == "completed" and record["metrics"]["steps"] == 6
    assert record["extensions"] == ["trainer.epochs: 1 -> 2", "trainer.max_steps: 4 -> 6"]
    assert record["resumes"] == 1 and record["resumed_from"].endswith("step_00000004")
    assert [r["step"] for r in read_jsonl(run_dir / "steps.jsonl")][-1] == 6


@pytest.mark.parametrize(
    "tool",
    [
        "experiments.train",
        "experiments.evaluate",
        "experiments.export",
        "experiments.gan.sample",
        "experiments.status",
        "experiments.report",
    ],
)
def test_a_bare_call_of_every_tool_prints_its_usage_and_exits_2(
    tool: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """One command-line style: a tool called with no argument trains, reads or writes
    nothing; it prints its usage (on stderr, as argparse does) and exits 2."""
    import importlib

    main = importlib.import_module(tool).main
    monkeypatch.setattr("sys.argv", [tool.rsplit(".", 1)[-1]])
    with pytest.raises(SystemExit) as ended:
        main()
    said = capsys.readouterr()
    assert ended.value.code == 2 and said.out == "", said
    assert said.err.startswith("usage: experiments-"), said.err
