"""Which rank failed, and why (run/failures.py): the records every failing rank writes, read
back the way rank 0 and the login process read them. The real multi-rank paths (a rank dying
under Slurm and torchrun) are in test_multinode.py; these pin the choice of the cause."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from experiments.run import failures

ECHO = (
    "RuntimeError: [../gloo/transport/tcp/pair.cc:561] Connection closed by peer "
    "[127.0.0.1]:16258. This is typically caused by a remote worker crashing."
)


@pytest.fixture
def slurm_attempt(monkeypatch: pytest.MonkeyPatch):
    def attempt(job: str, restart: str = "0") -> None:
        monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
        monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
        monkeypatch.setenv("SLURM_JOB_ID", job)
        monkeypatch.setenv("SLURM_RESTART_COUNT", restart)

    return attempt


def test_the_cause_is_the_dead_ranks_error_not_its_peers_echo(
    tmp_path: Path, slurm_attempt
) -> None:
    slurm_attempt("7")
    failures.write(tmp_path, 0, ECHO, ["rank0.log"])  # rank 0 noticed first...
    time.sleep(0.01)
    failures.write(tmp_path, 1, "ValueError: bad batch", ["rank1.log", "7_1_log.err"])
    cause = failures.cause(failures.read(tmp_path))
    assert (cause["rank"], cause["error"], cause["log"]) == (
        1,
        "ValueError: bad batch",
        "rank1.log",
    )
    assert failures.describe(cause).startswith("rank 1 on ")
    assert failures.describe(cause).endswith("failed: ValueError: bad batch (log: rank1.log)")


def test_only_echoes_name_the_first_rank_that_failed(tmp_path: Path, slurm_attempt) -> None:
    slurm_attempt("7")
    failures.write(tmp_path, 2, ECHO, ["rank2.log"])
    time.sleep(0.01)
    failures.write(tmp_path, 0, ECHO, ["rank0.log"])
    assert failures.cause(failures.read(tmp_path))["rank"] == 2


def test_an_earlier_attempts_records_are_history(tmp_path: Path, slurm_attempt) -> None:
    slurm_attempt("7", restart="0")
    failures.write(tmp_path, 1, "OSError: disk full", ["rank1.log"])
    slurm_attempt("7", restart="1")  # the requeued job
    failures.write(tmp_path, 0, "KeyError: 'x'", ["rank0.log"])
    assert [r["error"] for r in failures.read(tmp_path)] == ["KeyError: 'x'"]  # the newest
    assert [r["error"] for r in failures.read(tmp_path, "slurm:7:0")] == ["OSError: disk full"]
    failures.clear(tmp_path)
    assert failures.read(tmp_path) == []


def test_a_rank_whose_error_is_an_echo_waits_for_the_peers_record(
    tmp_path: Path, slurm_attempt
) -> None:
    slurm_attempt("9")
    own = failures.write(tmp_path, 0, ECHO, ["rank0.log"])
    started = time.time()
    assert failures.wait_for_cause(tmp_path, own, timeout_s=0.5) == own  # nobody else: its own
    assert time.time() - started >= 0.5
    failures.write(tmp_path, 1, "MemoryError: ", ["rank1.log"])
    assert failures.wait_for_cause(tmp_path, own, timeout_s=5)["rank"] == 1


def test_records_are_whole_json_files(tmp_path: Path, slurm_attempt) -> None:
    slurm_attempt("3")
    failures.write(tmp_path, 4, "RuntimeError: x", ["a.log"])
    (path,) = (tmp_path / failures.FOLDER).iterdir()  # no temporary left behind
    record = json.loads(path.read_text())
    assert (path.name, record["attempt"], record["logs"]) == ("rank_4.json", "slurm:3:0", ["a.log"])


@pytest.mark.slow
@pytest.mark.dist
def test_torchruns_own_report_names_the_failed_rank_with_its_traceback(tmp_path: Path) -> None:
    """Rank 1 of a 2-rank torchrun run fails before it joins the process group, where rank 0
    waits for it. torch elastic's @record (train.py) writes rank 1's exception to the error
    file torchrun gave it, so torchrun's own failure report names it as the root cause with
    its traceback (without @record the report says `error_file: <N/A>`), and the run's
    summary names rank 1 (our failure record, which multi-node and Slurm runs need)."""
    from .conftest import on_python_path, run_cli

    run_dir = tmp_path / "run"
    args = ["data=synthetic", "data.train_size=32", "data.val_size=16", "model.time_steps=2"]
    args += ["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"]
    site = str(Path(__file__).parent / "support" / "site")  # test-only fault injection
    result = run_cli(
        [*args, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        timeout=180,
        env={"PYTHONPATH": on_python_path(site), "EXPERIMENTS_TEST_FAIL_RANK": "1"},
    )
    assert result.returncode == 1, result.stderr[-3000:]
    report = result.stderr[result.stderr.index("Root Cause (first observed failure):") :]
    assert "rank      : 1 (local_rank: 1)" in report, report
    assert "error_file: <N/A>" not in report, report
    assert "RuntimeError: injected failure on rank 1" in report, report
    assert "Traceback" in report and "init_process_group" in report, report
    record = json.loads((run_dir / "summary.json").read_text())
    assert record["status"] == "failed", record
    assert "rank 1 on " in record["error"] and "injected failure on rank 1" in record["error"]
