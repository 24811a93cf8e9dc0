"""Sweeps at search scale: a 1000-point report that stays cheap and readable, and local points
that run warm (forked from one process that imported everything once) yet isolated."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib
import pytest
from PIL import Image

from bench.sweep_records import make_sweep
from bench.sweep_scale import POINT  # one tiny SNN point (1 step)
from experiments.report import figures, update_report, write_report
from experiments.report.points import INDEX, PointIndex
from experiments.snn.family import FAMILY as SNN

from .conftest import SITE, on_python_path, read_jsonl, run_cli

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def big_sweep(module_tmp: Callable[[str], Path]) -> Path:
    """1000 points: copies of a real run's records (no training), reported once."""
    sweep = make_sweep(module_tmp("big") / "sweep", 1000, seed=3)
    write_report(sweep)
    return sweep


def _expected(sweep: Path) -> tuple[list[str], str, float]:
    """Read back from the run directories without the report's code: the points, and the
    best completed point by val_accuracy."""
    summaries = {
        p.name: json.loads((p / "summary.json").read_text())
        for p in sweep.iterdir()
        if p.is_dir() and p.name.isdigit()
    }
    done = {
        n: s["metrics"]["val_accuracy"] for n, s in summaries.items() if s["status"] == "completed"
    }
    best = max(done, key=done.__getitem__)
    return sorted(summaries, key=int), best, done[best]


def test_a_1000_point_report_has_every_row_and_the_best_point(big_sweep: Path) -> None:
    names, best, best_value = _expected(big_sweep)
    with open(big_sweep / "report.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [row["point"] for row in table] == names
    assert {"optimizer.lr", "model.width"} <= set(table[0])
    failed = [row for row in table if row["status"] == "failed"]
    assert 0 < len(failed) < 100 and all(row["error"] for row in failed)
    markdown = (big_sweep / "report.md").read_text()
    assert f"Best val_accuracy: {best_value:.4f} (point {best})" in markdown
    top = markdown.split("## Top 5 by val_accuracy")[1].split("## All points")[0]
    assert top.count("| completed |") == 5 and f"| {best} |" in top


def test_figures_are_written_and_sized(big_sweep: Path) -> None:
    for name, size in [
        ("learning_curves.png", (1210, 462)),
        ("metric_vs_optimizer.lr.png", (704, 462)),
        ("metric_vs_model.width.png", (704, 462)),
    ]:
        image = Image.open(big_sweep / name)
        assert image.size == size, name
        # A drawn figure, not an empty canvas: many distinct colours.
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 16) or []) > 200, name
    assert "![learning_curves](learning_curves.png)" in (big_sweep / "report.md").read_text()


def test_figures_stay_readable_at_1000_points(big_sweep: Path) -> None:
    """Top-5 legends over a faint cloud; a scatter on a log axis for the sampled learning
    rate (no line through random values); boxes for the 3 widths; the best points starred."""
    import matplotlib.pyplot as plt

    points = PointIndex(big_sweep).refresh()
    ranked = figures.scored(points, SNN)
    _, axes = plt.subplots(1, 2)
    figures._curves(axes, points, ["optimizer.lr", "model.width"], ranked, SNN)
    for axis in axes:
        labels = axis.get_legend_handles_labels()[1]
        assert labels[0].startswith(f"{ranked[0][0]['point']}: ") and len(labels) == 5
        assert "top 5 of 1000" in axis.get_title()
        (cloud,) = axis.collections  # the other points: one faint, unlabelled collection
        assert len(cloud.get_segments()) >= 990 and cloud.get_label().startswith("_")
    _, axis = plt.subplots()
    figures._key_panel(axis, "optimizer.lr", ranked, SNN)
    assert axis.get_xscale() == "log" and not axis.lines
    assert [c.get_label() for c in axis.collections] == [f"{len(ranked)} completed points", "top 5"]
    _figure, axis = plt.subplots()
    figures._key_panel(axis, "model.width", ranked, SNN)
    assert [t.get_text() for t in axis.get_xticklabels()] == ["16", "32", "64"]
    assert len([p for p in axis.patches] + axis.lines) >= 3  # box + whiskers per width
    plt.close("all")


def test_an_update_after_a_point_reads_only_that_point(big_sweep: Path, tmp_path: Path) -> None:
    """The per-point update is linear over a sweep: it parses the summary of the point that
    finished (and of points new to the index), not the other 999."""
    sweep = shutil.copytree(big_sweep, tmp_path / "sweep")
    changed = sweep / "500" / "summary.json"
    summary = json.loads(changed.read_text())
    summary.update(status="completed", metrics={**summary.get("metrics", {}), "val_accuracy": 1.0})
    changed.write_text(json.dumps(summary))
    opened: list[str] = []
    watching = [True]

    def audit(event: str, args: tuple) -> None:
        if watching[0] and event == "open" and str(args[0]).endswith("summary.json"):
            opened.append(str(args[0]))

    sys.addaudithook(audit)  # audit hooks cannot be removed: `watching` turns it off

    outcome = update_report(sweep, point="500")
    reads, opened[:] = list(opened), []
    write_report(sweep, figures=False)  # a full rebuild stats everything, reads what changed
    full_reads, opened[:] = list(opened), []
    watching[0] = False
    assert reads == [str(changed)] and full_reads == []
    assert outcome["best"]["point"] == "500" and outcome["points"] == 1000
    # The run directories stay the truth: without the index the same report comes back.
    (sweep / INDEX).unlink()
    assert write_report(sweep, figures=False)["best"]["point"] == "500"


@pytest.mark.slow
def test_warm_points_fork_from_one_process_and_a_crash_fails_only_its_point(
    tmp_path: Path,
) -> None:
    """Three identical points in one warm worker; point 1 SIGKILLs itself (test-only fault
    injection). Points 0 and 2 complete on the same losses as a cold single run."""
    env = {
        "EXPERIMENTS_TEST_KILL_POINT": "1",
        "PYTHONPATH": on_python_path(SITE),
    }
    sweep = tmp_path / "sweep"
    result = run_cli(
        ["-m", *POINT, "seed=5,5,5", f"hydra.sweep.dir={sweep}"], cwd=tmp_path, env=env
    )
    assert result.returncode == 1, result.stderr[-3000:]  # a failed point fails the sweep
    summaries = {n: json.loads((sweep / n / "summary.json").read_text()) for n in "012"}
    assert [summaries[n]["status"] for n in "012"] == ["completed", "failed", "completed"]
    assert "status -9" in summaries["1"]["error"] or "-9" in summaries["1"]["error"]
    workers = {summaries[n]["warm_worker"] for n in "02"}
    assert len(workers) == 1 and None not in workers  # forked from one warm process
    cold = tmp_path / "cold"
    # The cold run also shows logger=none: no logger, the run's own record only.
    single = run_cli([*POINT, "seed=5", "logger=none", f"hydra.run.dir={cold}"], cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    assert json.loads((cold / "summary.json").read_text())["warm_worker"] is None
    assert not (cold / "tensorboard").exists() and (sweep / "0" / "tensorboard").is_dir()
    losses = [
        [r["loss"] for r in read_jsonl(d / "steps.jsonl")] for d in (sweep / "0", sweep / "2", cold)
    ]
    assert losses[0] == losses[1] == losses[2] and len(losses[0]) == 1


@pytest.mark.slow
def test_a_killed_sweep_login_stops_its_warm_point_after_a_checkpoint(tmp_path: Path) -> None:
    """SIGKILL the login of a local sweep while its first point trains in a fork of the
    warm process (the stdlib forkserver): the server ends with the login and the point with
    the server (SIGTERM: a checkpoint, `interrupted`), within seconds, leaving no process of
    the sweep behind (a point holding the server's "alive" pipe would train on, unwatched,
    and keep its directory locked)."""
    import signal
    import time

    from .conftest import CLI, NO_SPIKES, cli_env
    from .support import processes

    sweep = tmp_path / "sweep"
    args = ["-m", "data=synthetic", "data.train_size=256", "data.val_size=32"]
    args += ["model.time_steps=2", "trainer.batch_size=8", "trainer.epochs=3", "seed=1,2"]
    args += ["logger=none", "trainer.spikes.guard=null", *NO_SPIKES]
    args += [f"hydra.sweep.dir={sweep}"]
    with open(tmp_path / "login.err", "w") as stderr:
        login = processes.spawn([CLI, *args], cwd=tmp_path, env=cli_env(), stderr=stderr)
    deadline = time.time() + 120
    while not (sweep / "0" / "steps.jsonl").exists():
        assert time.time() < deadline and login.poll() is None, (tmp_path / "login.err").read_text()
        time.sleep(0.2)
    assert len(processes.tagged_pids(login.tag)) >= 3  # the login, the server, the point
    login.send_signal(signal.SIGKILL)
    login.wait()
    deadline = time.time() + 60
    while processes.tagged_pids(login.tag):
        assert time.time() < deadline, "the warm server or its point outlived the login"
        time.sleep(0.2)
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["status"] == "interrupted", summary
    assert not (sweep / "1").exists()  # nothing started after the login died


def test_the_warm_process_preloads_timm_when_planning_the_sweep_imported_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """timm (the paper presets' schedules, mixup, augmentations) is imported once by the warm
    process when the login's plans of the points imported it, not once a point; a sweep whose
    plans never touched it does not pay its import."""
    from experiments.launchers import warm_points

    monkeypatch.delitem(sys.modules, "timm", raising=False)
    assert "timm" not in warm_points.modules_for("spikingjelly")
    monkeypatch.setitem(sys.modules, "timm", type(sys)("timm"))
    assert "timm" in warm_points.modules_for("spikingjelly")


def test_a_sweeps_login_launches_each_point_with_the_plan_it_built_before_the_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The login planned every point before the first one started (callbacks.on_multirun_start):
    its task function launches a point with that plan, and plans afresh only a point whose
    directory or overrides are not the ones it planned."""
    from types import SimpleNamespace

    from experiments import callbacks, train

    built = SimpleNamespace(run_dir=tmp_path / "0", overrides=["seed=5"])
    monkeypatch.setattr(callbacks, "planned", None)
    monkeypatch.setattr(callbacks, "sweep_plans", {built.run_dir: built})
    monkeypatch.setattr(train, "build_plan", lambda *args, **kwargs: "planned again")

    def job(run_dir: Path, overrides: list[str]) -> SimpleNamespace:
        return SimpleNamespace(
            runtime=SimpleNamespace(output_dir=str(run_dir), choices={}),
            overrides=SimpleNamespace(task=overrides),
        )

    assert train._plan_of(None, job(tmp_path / "0", ["seed=5"])) is built
    assert train._plan_of(None, job(tmp_path / "0", ["seed=6"])) == "planned again"
    assert train._plan_of(None, job(tmp_path / "1", ["seed=5"])) == "planned again"
