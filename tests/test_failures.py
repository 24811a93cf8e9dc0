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
