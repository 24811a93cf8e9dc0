"""Hydra's composition errors reach experiments-train's main only while Hydra composes
(composition_errors.reported_in_one_line): HYDRA_FULL_ERROR, which Hydra reads when it
catches an error, is set until the callback says the config is composed, so that a run's own
failure, and every process the run starts, meet Hydra's reporting as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from experiments import composition_errors

from .conftest import run_cli_in_process


def test_hydra_reports_a_runs_own_failure_again_once_composed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with composition_errors.reported_in_one_line([], "train"):
        assert os.environ.get("HYDRA_FULL_ERROR") == "1"  # while composing: to our main
        composition_errors.composed()  # (callbacks.on_run_start / on_multirun_start)
        assert "HYDRA_FULL_ERROR" not in os.environ  # the run, and what it starts: Hydra's
    assert "HYDRA_FULL_ERROR" not in os.environ


def test_a_hydra_full_error_of_the_users_own_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """As torchrun's ranks have it (train.py sets it for torch elastic's @record)."""
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with composition_errors.reported_in_one_line([], "train"):
        composition_errors.composed()
        assert os.environ.get("HYDRA_FULL_ERROR") == "1"
    assert os.environ.get("HYDRA_FULL_ERROR") == "1"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["trainer.epochs=["],
            "error: cannot parse the override 'trainer.epochs=[': no viable alternative at "
            "input '[' See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details",
        ),
        (
            ["--config-dir", "/no/such/folder"],
            "error: Additional config directory '/no/such/folder' not found",
        ),
    ],
)
def test_hydras_other_composition_errors_are_its_message_on_one_line(
    args: list[str], line: str, tmp_path: Path
) -> None:
    """What is no key's mistake keeps Hydra's words, on one line, exit 2 (Hydra: exit 1 and
    "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace")."""
    result = run_cli_in_process([*args, "dry_run=true"], cwd=tmp_path)
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [line])
    assert list(tmp_path.iterdir()) == []
