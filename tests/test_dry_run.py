"""A dry run never trains, submits or records, whatever happens to the process around it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import CLI, REPO, run_cli, run_cli_in_process
from .test_docs import Command, as_checked, stand_in_place
from .test_docs import commands as docs_commands

# The CLI's entry point runs in-process (run_cli_in_process) except where a process of its own
# is the point (closed stdout; the task function reached without the callback): `make test`.
pytestmark = pytest.mark.slow


def _written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_dry_run_with_stdout_closed_ends_quietly_and_writes_nothing(tmp_path: Path) -> None:
    """`experiments-train dry_run=true | head -0`: the reader is gone before the plan is
    printed. The process must end (0, or 141 as after SIGPIPE), not go on to train."""
    proc = subprocess.Popen(
        [CLI, "dry_run=true", "trainer.max_steps=1", "data=synthetic"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # nobody reads the plan
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode in (0, 141), stderr.decode()[-2000:]
    assert b"Traceback" not in stderr
    assert _written(tmp_path) == []


def test_run_path_refuses_to_train_when_dry_run_reaches_it(tmp_path: Path) -> None:
    """Without the validating callback (removed here on purpose), the task function itself
    must refuse a dry run: exit 2, nothing trained or recorded."""
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "dry_run=true",
            "data=synthetic",
            "trainer.max_steps=1",
            "~hydra.callbacks.experiments",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "dry_run is set" in result.stderr and "nothing was trained" in result.stderr
    assert not (run_dir / "summary.json").exists()
    assert not (run_dir / "checkpoints").exists()


def test_multirun_dry_run_lists_each_point_and_refuses_a_bad_one_writing_nothing(
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli_in_process(
        ["-m", "optimizer.lr=1e-3,abc,2e-3", "dry_run=true", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "sweep of 3 points (swept: optimizer.lr):"
    assert lines[1].startswith("  point 0: optimizer.lr=0.001") and lines[1].endswith("plans")
    assert lines[2].startswith("  point 1: optimizer.lr=abc") and "REFUSED" in lines[2]
    assert lines[3].startswith("  point 2: optimizer.lr=0.002") and lines[3].endswith("plans")
    assert "error: sweep point 1 (optimizer.lr=abc): invalid config: optimizer.lr='abc'" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert _written(tmp_path) == []  # no multirun.yaml, no point directory


def test_multirun_dry_run_prints_the_point_lines_before_the_plans(tmp_path: Path) -> None:
    result = run_cli_in_process(["-m", "optimizer.lr=1e-3,2e-3", "dry_run=true"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.index("  point 1: optimizer.lr=0.002  -> plans") < out.index("--- sweep point 0")
    assert out.count("Run plan (dry run") == 2
    assert _written(tmp_path) == []


def test_search_dry_run_with_an_interval_shows_the_base_plan_and_trains_nothing(
    tmp_path: Path,
) -> None:
    """Optuna's interval() is not a value Hydra can compose: once it turned into a callback
    warning and the search trained."""
    result = run_cli_in_process(
        [
            "hparams_search=digits_lr",
            "optimizer.lr=interval(1e-4,1e-2)",
            "dry_run=json",
            "data=synthetic",
            "trainer.max_steps=1",
            "hydra.sweeper.n_trials=1",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    plan = json.loads(result.stdout[result.stdout.index("{") :])
    assert plan["run_dir"].endswith("/0")
    assert _written(tmp_path) == []


def test_an_exception_while_checking_ends_the_process_with_exit_2(tmp_path: Path) -> None:
    """Any failure inside validation (here: an unknown key in one sweep point, which Hydra
    raises while composing) is one line and exit 2, not a warning followed by a run."""
    sweep = tmp_path / "sweep"
    result = run_cli_in_process(
        ["-m", "optimizer.lr=1e-3", "trainer.no_such_key=1,2", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not sweep.exists()


def test_sweep_directory_name_ignores_dry_run_and_argument_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from experiments import _sweep_id

    names = []
    for argv in (
        ["-m", "optimizer.lr=1e-3,2e-3", "seed=1"],
        ["-m", "seed=1", "optimizer.lr=1e-3,2e-3", "dry_run=true"],
        ["seed=1", "dry_run=json", "-m", "optimizer.lr=1e-3,2e-3"],
    ):
        monkeypatch.setattr(sys, "argv", ["experiments-train", *argv])
        names.append(_sweep_id())
    assert len(set(names)) == 1, names
    # and through the CLI: the dry run previews the directory a real run would use
    dirs = []
    for argv in (
        ["-m", "seed=1", "optimizer.lr=1e-3,2e-3"],
        ["-m", "optimizer.lr=1e-3,2e-3", "seed=1"],
    ):
        result = run_cli_in_process([*argv, "dry_run=json"], cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        dirs.append([point["run_dir"] for point in json.loads(result.stdout)])
    assert dirs[0] == dirs[1]
    assert Path(dirs[0][0]).parent.name == names[0]


@pytest.mark.parametrize(
    "args",
    [
        ["launcher=slurm", "dry_run=true"],
        ["launcher=slurm", "dry_run=json", "topology=ddp", "launcher.tasks_per_node=2"],
        ["-m", "launcher=slurm", "optimizer.lr=1e-3,2e-3", "dry_run=true"],
        ["launcher=slurm", "launcher.tasks_per_node=0"],  # refused: nothing queued either
    ],
)
def test_slurm_dry_runs_and_refusals_never_call_slurm(args: list[str], tmp_path: Path) -> None:
    """Stand-ins for Slurm's commands first on PATH record any call; none may happen."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for command in ("sbatch", "srun", "squeue", "scancel", "sacct", "scontrol", "sinfo"):
        stand_in = bin_dir / command
        stand_in.write_text(f'#!/bin/sh\necho "{command} $*" >> {calls}\nexit 1\n')
        stand_in.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli_in_process(
        args, cwd=work, env={"PATH": f"{bin_dir}:{Path(CLI).parent}:/usr/bin:/bin"}
    )
    assert result.returncode == (2 if "dry_run" not in " ".join(args) else 0), result.stderr[-2000:]
    assert not calls.exists(), calls.read_text()
    assert _written(work) == []


def _on_slurm(words: tuple[str, ...]) -> bool:
    """`launcher=slurm`, or a named recipe (conf/experiment/, as installed) that picks it."""
    import yaml

    import experiments

    if "launcher=slurm" in words:
        return True
    presets = Path(experiments.__file__).parent / "conf" / "experiment"
    for word in words:
        if word.startswith("experiment="):
            recipe = yaml.safe_load((presets / f"{word.split('=', 1)[1]}.yaml").read_text())
            return {"override /launcher": "slurm"} in (recipe or {}).get("defaults", [])
    return False


def _readme_slurm_commands() -> list[Command]:
    """The README's `experiments-train` commands that submit to Slurm, read as
    tests/test_docs.py reads every command of the docs (continuation lines joined, comments
    dropped; refusals left out)."""
    return [
        command
        for command in docs_commands(REPO / "README.md")
        if _on_slurm(command.words) and command.refused is None
    ]


def test_readme_slurm_examples_pass_their_dry_run_as_written(tmp_path: Path) -> None:
    """Each Slurm example of the README is accepted as written (once `single` with 8 ranks
    was refused there); the dry run stands in for the submission and shows the sbatch script.
    A data.root this machine lacks is a stand-in folder of its layout (test_docs.py)."""
    commands = _readme_slurm_commands()
    assert len(commands) >= 3, commands  # the sweep, the two-node job, the ImageNet recipe
    with stand_in_place() as data:
        for command in commands:
            args = [a for a in as_checked(command, tmp_path, data) if not a.startswith("dry_run=")]
            args.append("dry_run=true")
            result = run_cli_in_process(args, cwd=tmp_path)
            assert result.returncode == 0, (shlex.join(args), result.stderr[-2000:])
            assert "#SBATCH --nodes=" in result.stdout
            asks = [ln for ln in result.stdout.splitlines() if "Slurm job: " in ln]
            assert asks and all("GPU per task (launcher.gpus_per_node=" in a for a in asks), asks
    assert _written(tmp_path) == []


def test_a_slurm_script_imports_its_code_snapshot_unless_snapshot_is_off(tmp_path: Path) -> None:
    """The sbatch script the dry run shows puts the submission's code copy first on
    PYTHONPATH (launchers/snapshot.py); launcher.snapshot=false leaves the installed code."""
    shown = {}
    for snapshot in ("true", "false"):
        args = ["launcher=slurm", f"launcher.snapshot={snapshot}", "dry_run=true"]
        result = run_cli_in_process([*args, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        shown[snapshot] = result.stdout
    copy = tmp_path / "sweep" / ".snapshot" / "SUBMISSION-TIME-PID"
    assert f"export EXPERIMENTS_SNAPSHOT={copy}" in shown["true"]
    assert f"export PYTHONPATH={copy / 'site'}" in shown["true"]
    assert "EXPERIMENTS_SNAPSHOT" not in shown["false"] and "#SBATCH" in shown["false"]
    for printed in shown.values():  # an SNN job asking no GPU is told so
        assert "no GPU (launcher.gpus_per_node=0)" in printed
        assert "warning: launcher.gpus_per_node=0: the job asks Slurm for no GPU" in printed
    assert not (tmp_path / "sweep").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("launcher", "family", "asks", "warned"),
    [
        (
            {"nodes": 1, "tasks_per_node": 1},
            "snn",
            "1 node(s) x 1 task(s), no GPU (launcher.gpus_per_node=0)",
            True,
        ),
        (
            {"nodes": 2, "tasks_per_node": 4, "gpus_per_node": 4},
            "snn",
            "2 node(s) x 4 task(s), 1 GPU per task (launcher.gpus_per_node=4)",
            False,
        ),
        ({"nodes": 1, "tasks_per_node": 1}, "gan", "no GPU (launcher.gpus_per_node=0)", False),
    ],
)
def test_a_slurm_plan_states_the_gpus_per_task_and_warns_an_snn_without_gpus(
    launcher: dict, family: str, asks: str, warned: bool
) -> None:
    """Slurm grants no GPU unless launcher.gpus_per_node asks: the plan says what each job
    asks for, and an SNN job asking none is warned that SpikingJelly's loop trains on CPUs
    (a GAN on CPUs is MMGen's CPU path, asked for: no warning). The dry runs above print
    these lines (the README's Slurm examples, and an SNN job asking no GPU)."""
    from experiments.launchers.slurm import resources

    lines = resources({"cpus_per_task": 2, "mem_gb": 8, "timeout_min": 60, **launcher}, family)
    assert lines[0].startswith("Slurm job: ") and asks in lines[0], lines
    warning = "warning: launcher.gpus_per_node=0: the job asks Slurm for no GPU"
    assert any(warning in line for line in lines[1:]) is warned, lines
