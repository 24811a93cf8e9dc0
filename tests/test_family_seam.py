"""A third model family, added the way a user's own package adds one: its module (`FAMILY`),
one entry point in the `experiments.families` group and a Hydra search-path plugin for its
model option, all under tests/support/toy_family, with no edit to the experiments package.
It plans, refuses a bad value before launch, dry-runs, runs as a sweep and is reported and
shown by experiments-status exactly as the built-in families are (experiments/families.py)."""

from __future__ import annotations

import csv
import json

import pytest

from experiments import families, status

from .conftest import REPO, on_python_path, run_cli, run_cli_in_process

TOY = REPO / "tests" / "support" / "toy_family"
# In this process Hydra's plugins were discovered before the toy's folder was on sys.path;
# the sweep below (its own processes) finds the model option through the toy's plugin.
SEARCH_PATH = "hydra.searchpath=[pkg://toy_family.conf]"


@pytest.fixture
def toy_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The toy's folder on the path of this process and of every process it starts, and the
    family registry read again (entry points included) on its next use, and after the test."""
    monkeypatch.syspath_prepend(str(TOY))
    monkeypatch.setattr(families, "_registry", {})
    monkeypatch.setattr(families, "_loaded", False)
    return {"PYTHONPATH": on_python_path(str(TOY))}


def test_a_third_family_plans_runs_and_reports_with_no_edit_to_the_package(
    tmp_path, toy_env, capsys
) -> None:
    planned = run_cli_in_process(
        ["model=toy", "model.steps=4", "dry_run=true", SEARCH_PATH], tmp_path
    )
    assert planned.returncode == 0, planned.stderr
    assert "toy plan: 4 steps at rate 0.5" in planned.stdout
    assert not (tmp_path / "outputs").exists()  # a dry run writes nothing
    assert [f.name for f in families.all_families()] == ["toy", "gan", "snn"]  # its entry point

    refused = run_cli_in_process(["model=toy", "model.rate=-1", SEARCH_PATH], tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip() == "error: invalid config: model.rate=-1: a number > 0, e.g. 0.5"
    assert not (tmp_path / "outputs").exists()  # refused before Hydra made a directory

    sweep = tmp_path / "sweep"
    result = run_cli(
        ["-m", "model=toy", "model.rate=0.5,2", "logger=csv", f"hydra.sweep.dir={sweep}"],
        tmp_path,
        env=toy_env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Toy run completed: score 6.000" in result.stdout  # the family's own lines
    for point, score in (("0", 1.5), ("1", 6.0)):
        summary = json.loads((sweep / point / "summary.json").read_text())
        assert (summary["status"], summary["engine"]) == ("completed", "toy")
        assert summary["metrics"]["score"] == score
        csv_metrics = (sweep / point / "csv" / "metrics.csv").read_text()
        assert "score" in csv_metrics  # the loggers got its per-step records
    with open(sweep / "report.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["point"], float(r["score"])) for r in rows] == [("0", 1.5), ("1", 6.0)]
    report = (sweep / "report.md").read_text()
    assert "score" in report and "higher is better" in report
    assert (sweep / "learning_curves.png").stat().st_size > 0  # its curves, from its logs

    capsys.readouterr()
    status.main([str(sweep)])
    assert "score=6" in capsys.readouterr().out  # its objective, read through the seam
