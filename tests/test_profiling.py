"""`trainer.profile_steps`: real torch.profiler windows, traces TensorBoard can read, and
step/collective figures per rank in summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from experiments.snn.engines.profiling import StepProfiler, summary_metrics

from .conftest import DDP_ACCUMULATING_PROFILED, FAST_SINGLE, SharedRuns


def _work() -> None:
    torch.randn(256, 256) @ torch.randn(256, 256)


def test_profiler_records_its_window_and_writes_a_tensorboard_trace(tmp_path: Path) -> None:
    profiler = StepProfiler(3, tmp_path, rank=0).start()
    for _ in range(8):  # 1 skipped + 1 warm-up + 3 recorded, then it stops itself
        _work()
        profiler.step()
    profiler.stop()
    assert profiler.digest is not None and profiler.digest["steps"] == 3
    assert profiler.digest["step_ms"] > 0
    assert profiler.digest["collective_ms"] == 0.0  # one process, no process group
    (trace,) = (tmp_path / "profile").glob("rank0*.pt.trace.json")
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert "aten::mm" in names


def test_run_ending_inside_the_window_keeps_the_steps_recorded(tmp_path: Path) -> None:
    profiler = StepProfiler(5, tmp_path, rank=0).start()
    for _ in range(4):  # skip, warm-up, then 2 of the 5 recorded steps
        _work()
        profiler.step()
    profiler.stop()
    assert profiler.digest is not None and profiler.digest["steps"] == 2
    assert summary_metrics([profiler.digest])["profile_steps"] == 2


def test_run_ending_before_the_window_records_nothing(tmp_path: Path) -> None:
    profiler = StepProfiler(5, tmp_path, rank=0).start()
    for _ in range(2):
        _work()
        profiler.step()
    profiler.stop()
    assert profiler.digest is None
    assert summary_metrics([profiler.digest]) == {}
    assert not (tmp_path / "profile").exists()


def test_zero_steps_is_off(tmp_path: Path) -> None:
    profiler = StepProfiler(0, tmp_path, rank=0).start()
    profiler.step()
    profiler.stop()
    assert profiler.digest is None and not (tmp_path / "profile").exists()


def _said_the_profile(stdout: str, stderr: str) -> None:
    """The closing report names the profile (checked for every profiled run here)."""
    assert "gpuGetDeviceCount" not in stderr  # Kineto's CPU-only noise is silenced
    assert "ms/step, collectives in flight" in stdout


def _metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())["metrics"]


@pytest.mark.slow
def test_single_process_run_records_step_time_and_no_communication(
    shared_runs: SharedRuns,
) -> None:
    """The session's single-process FAST run, its first two steps profiled
    (conftest.FAST_SINGLE)."""
    run_dir = shared_runs.get("fast_single", FAST_SINGLE)
    _said_the_profile(*shared_runs.output("fast_single"))
    metrics = _metrics(run_dir)
    assert metrics["profile_steps"] == 2
    (step_ms,) = metrics["profile_step_ms_per_rank"]
    assert step_ms > 0
    assert metrics["profile_collective_ms_per_rank"] == [0.0]
    assert len(list((run_dir / "profile").glob("rank0*.pt.trace.json"))) == 1


@pytest.mark.slow
@pytest.mark.dist
def test_ddp_ranks_record_time_spent_in_collectives(shared_runs: SharedRuns) -> None:
    """The session's two-rank DDP run, its steps of two micro-batches each profiled
    (conftest.DDP_ACCUMULATING_PROFILED; test_global_batch.py reads its accumulation)."""
    run_dir = shared_runs.get("ddp_accumulating_profiled", DDP_ACCUMULATING_PROFILED)
    _said_the_profile(*shared_runs.output("ddp_accumulating_profiled"))
    metrics = _metrics(run_dir)
    assert metrics["profile_steps"] == 2
    steps = metrics["profile_step_ms_per_rank"]
    collectives = metrics["profile_collective_ms_per_rank"]
    assert len(steps) == len(collectives) == 2
    for step_ms, collective_ms in zip(steps, collectives, strict=True):
        # gloo's all-reduce of the gradient buckets happens every step, inside the step
        assert 0 < collective_ms <= step_ms * 1.1
    assert {p.name.split(".")[0] for p in (run_dir / "profile").glob("*.pt.trace.json")} == {
        "rank0",
        "rank1",
    }
