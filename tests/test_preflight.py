"""Preflight: the environment a run's ranks will meet, checked before anything is written or
queued (preflight.py, snn/neurons.py), and again in each Slurm task before it trains."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from .conftest import BIN, NO_SPIKES, TINY_POINT, cli_env, run_cli, run_cli_in_process
from .support import processes
from .test_robustness import small_disk  # noqa: F401 (a fixture: a tmpfs of its own)

MAIN = ["experiment=digits_sew_resnet18"]


def test_a_pinned_cuda_kernel_on_a_cpu_only_run_is_refused_writing_nothing(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli_in_process(
        [*MAIN, "model.neuron_implementation=triton", f"hydra.run.dir={run_dir}"], cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        "error: invalid config: model.neuron_implementation='triton': auto or torch: this run "
        "has no CUDA"
    ), line
    assert not run_dir.exists() and "Traceback" not in result.stderr


def test_the_plan_shows_the_neuron_kernel_and_summary_json_records_it(tmp_path: Path) -> None:
    shown = run_cli_in_process([*MAIN, "dry_run=true"], cwd=tmp_path).stdout
    assert "  neurons    lif: torch-reference (model.neuron_implementation=auto)" in shown
    planned = json.loads(run_cli_in_process([*MAIN, "dry_run=json"], cwd=tmp_path).stdout)
    assert planned["neuron"] == {
        "type": "lif",
        "requested": "auto",
        "implementation": "torch-reference",
    }


def test_a_run_directory_too_small_for_its_checkpoints_is_refused_before_launch(
    small_disk,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The main job's SEW-ResNet18 keeps 2 checkpoints (AdamW: weights and two moments, ~128
    MB each) and writes a third: 384 MB do not fit on 100 MB. Refused in one line naming the
    free and needed space and the fix; nothing is written there. experiments-doctor shows the
    same check failing in its table and exits 1."""
    small_disk("100m")
    run_dir = small_disk.path / "run"
    result = run_cli_in_process([*MAIN, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: preflight: free space: ") and "MB needed" in line, line
    assert "fix: free space there" in line
    assert list(small_disk.path.iterdir()) == []  # not even the run directory
    doctor = run_cli_in_process([*MAIN, f"hydra.run.dir={run_dir}", "dry_run=doctor"], tmp_path)
    assert doctor.returncode == 1, doctor.stderr
    assert "free space     MISSING: " in doctor.stdout and "neuron kernel  ok" in doctor.stdout
    assert list(small_disk.path.iterdir()) == []


def test_doctor_passes_the_main_job_and_names_a_pinned_kernel_it_cannot_have(
    tmp_path: Path,
) -> None:
    """The console script, as a user runs it first on a new machine."""
    doctor = str(BIN / "experiments-doctor")
    ok = processes.run([doctor, *MAIN], cwd=tmp_path, timeout=120, env=cli_env())
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0].split() == ["check", "result"]
    assert [line.split()[0] for line in lines[1:]] == ["neuron", "free"]
    assert all(" ok: " in line for line in lines[1:]), ok.stdout
    refused = run_cli_in_process(
        [*MAIN, "model.neuron_implementation=triton", "dry_run=doctor"], cwd=tmp_path
    )
    assert refused.returncode == 2 and "neuron_implementation='triton'" in refused.stderr
    assert not list(tmp_path.glob("outputs"))


# --- node-side checks, each made to fail in a real Slurm task -------------------------------

SLURM = [
    "model.time_steps=1",
    "trainer.batch_size=8",
    "logger=none",
    "trainer.spikes.guard=null",
    *NO_SPIKES,  # no test here reads spike figures
    "trainer.max_steps=1",
    "launcher=slurm",
    "launcher.mem_gb=2",
    "launcher.cpus_per_task=1",
    "launcher.wait=false",
    "+launcher.additional_parameters.hold=true",  # queued held: the test breaks what it needs
]


def _held_jobs(sweep: Path) -> list[str]:
    record = json.loads((sweep / "submitted.json").read_text())
    return sorted({point["job_id"].split("_")[0] for point in record["points"].values()})


def _failed(run_dir: Path, timeout: float = 240) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        path = run_dir / "summary.json"
        if path.is_file():
            summary = json.loads(path.read_text())
            if summary.get("status") not in (None, "running"):
                return summary
        time.sleep(0.5)
    pytest.fail(f"{run_dir}: no final summary.json within {timeout} s")


@pytest.mark.slow
@pytest.mark.slurm
def test_each_node_side_check_fails_its_slurm_task_in_seconds(
    slurm_cluster,
    small_disk,  # noqa: F811
    tmp_path: Path,
    imagefolder_session: Path,
) -> None:
    """The login checks pass and the jobs queue held; then what a compute node would meet is
    broken, the jobs are released, and each task stops before it trains, its summary.json
    naming the check: point 0's data lost an image after the login counted it (a dataset
    synced differently to the nodes), point 1's token is gone (a node that does not see the
    login's directory), and a third job's filesystem filled up while it waited."""
    data = tmp_path / "data"
    shutil.copytree(imagefolder_session, data)
    sweep = tmp_path / "sweep"
    folder = ["data=imagefolder", "data.num_classes=10", "data.image_size=32"]
    login = run_cli(
        [
            "-m",
            *SLURM,
            *folder,
            f"data.root={data},{imagefolder_session}",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
    )
    assert login.returncode == 0, login.stderr[-3000:]
    small_disk("500m")  # the login's 384 MB fit; once 300 MB are taken, they do not
    full = small_disk.path / "sweep"
    second = run_cli([*SLURM, *TINY_POINT[:4], f"hydra.sweep.dir={full}"], cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]

    next(iter(sorted((data / "train").rglob("*.png")))).unlink()
    (sweep / ".preflight" / "1.json").unlink()
    (small_disk.path / "filler").write_bytes(b"\0" * 300 * 2**20)
    started = time.time()
    for job in [*_held_jobs(sweep), *_held_jobs(full)]:
        released = processes.run(["scontrol", "release", job], timeout=30)
        assert released.returncode == 0, released.stderr

    changed, unseen, filled = _failed(sweep / "0"), _failed(sweep / "1"), _failed(full / "0")
    assert time.time() - started < 120  # seconds of start-up, no training
    assert "preflight: data root: " in changed["error"], changed
    assert "39 training images here, but the login counted 10 classes and 40" in changed["error"]
    assert "preflight: run directory: " in unseen["error"] and "1.json" in unseen["error"]
    assert "preflight: free space: " in filled["error"], filled
    for summary in (changed, unseen, filled):
        assert summary["status"] == "failed" and "steps" not in summary.get("metrics", {})
