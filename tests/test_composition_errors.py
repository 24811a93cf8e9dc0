"""Hydra's composition errors reach experiments-train's main only while Hydra composes
(composition_errors.reported_in_one_line): HYDRA_FULL_ERROR, which Hydra reads when it
catches an error, is set until the callback says the config is composed, so that a run's own
failure, and every process the run starts, meet Hydra's reporting as before."""

from __future__ import annotations

import os

import pytest

from experiments import composition_errors


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
