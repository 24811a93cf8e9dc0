"""experiments-status: one table of where each point stands, read from the run directories.

The runs here are records written as our runs write them (summary.json, steps.jsonl,
metrics.jsonl); test_robustness.py runs the command on a real interrupted-then-broken sweep.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import status


def _point(root: Path, name: str, summary: dict, steps: list[dict] = (), epochs: list[dict] = ()):
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"record_format": 1, **summary}))
    (run / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in epochs))
    return run


def test_each_state_with_its_progress_loss_objective_or_error(tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "sweep"
    _point(
        sweep,
        "0",
        {"status": "completed", "engine": "cpu", "metrics": {"val_accuracy": 0.9}},
        [{"step": 8, "loss": 0.31}],
        [{"epoch": 2, "val_accuracy": 0.9}],
    )
    _point(sweep, "1", {"status": "running", "engine": "cpu"}, [{"step": 3, "loss": 1.25}])
    _point(sweep, "2", {"status": "failed", "engine": "cpu", "error": "RuntimeError: boom\nmore"})
    _point(
        sweep,
        "3",
        {"status": "interrupted", "engine": "mmgen", "interrupted": "SIGTERM"},
        epochs=[{"step": 40, "loss_gen": 2.5}],
    )
    _point(sweep, "10", {"status": "completed", "engine": "mmgen", "metrics": {"swd": 12.5}})
    status.main([str(sweep)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["point", "state", "progress", "last", "loss", "objective", "note"]
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert list(rows) == ["0", "1", "2", "3", "10"]  # numerically ordered
    assert rows["0"].split()[1:] == [
        "completed",
        "step",
        "8",
        "epoch",
        "2",
        "0.31",
        "val_accuracy=0.9",
    ]
    assert rows["1"].split()[1:] == ["running", "step", "3", "1.25"]
    assert rows["2"].split()[1] == "failed" and rows["2"].endswith("RuntimeError: boom")
    assert rows["3"].split()[1:] == ["interrupted", "step", "40", "2.5", "SIGTERM"]
    assert rows["10"].split()[1:] == ["completed", "swd=12.5"]  # a GAN's objective
    assert lines[-1] == "5 point(s): 2 completed, 1 failed, 1 interrupted, 1 running"


def test_one_run_directory_is_one_row(tmp_path: Path, capsys) -> None:
    run = _point(tmp_path, "run", {"status": "completed", "metrics": {"val_accuracy": 0.5}})
    status.main([str(run)])
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ["run", "completed"] and out[-1] == "1 point(s): 1 completed"
    command = "experiments-train model=sew_resnet34 hydra.run.dir=/runs/2026-12-06/10-00-00-000000"
    stopped = _point(tmp_path, "stopped", {"status": "interrupted", "resume_command": command})
    status.main([str(stopped)])
    assert capsys.readouterr().out.splitlines()[-1] == f"resume (once stopped): {command}"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["{tmp}/missing"], "no such directory"),
        (["{tmp}"], "is neither a sweep directory (no 0/, 1/, ...) nor a run directory"),
        (["{sweep}", "--watch", "0"], "--watch 0.0: a number of seconds > 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys, args, said) -> None:
    _point(tmp_path / "sweep", "0", {"status": "running"})
    (tmp_path / "empty").mkdir()
    values = {"tmp": tmp_path / "empty", "sweep": tmp_path / "sweep"}
    with pytest.raises(SystemExit) as exit_:
        status.main([a.format(**values) for a in args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


def test_report_of_a_sweep_under_way_says_what_is_still_to_come(tmp_path: Path, capsys) -> None:
    """experiments-report on a sweep that is partly done (a Slurm sweep submitted with its jobs
    still queued, say): it reports what finished and counts the points still running and
    those not started, from the sweep's multirun.yaml (4 points planned, 2 begun)."""
    from experiments import report

    sweep = tmp_path / "sweep"
    _point(
        sweep,
        "0",
        {
            "status": "completed",
            "engine": "cpu",
            "metrics": {"val_accuracy": 0.9},
            "overrides": ["optimizer.lr=0.001"],
        },
    )
    _point(sweep, "1", {"status": "running", "engine": "cpu", "overrides": ["optimizer.lr=0.003"]})
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    _target_: hydra._internal.core_plugins.basic_sweeper."
        "BasicSweeper\n    params: null\n  overrides:\n    task:\n"
        "    - optimizer.lr=0.001,0.003,0.01,0.03\n    - trainer.epochs=1\n"
    )
    with pytest.raises(SystemExit) as exited:
        report.main([str(sweep)])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "2 points (1 completed, 1 running)" in out
    assert "best val_accuracy 0.9000 at point 0" in out
    assert "still to come: 1 point(s) running, 2 not started" in out
    (sweep / "1" / "summary.json").write_text(
        json.dumps(
            {
                "record_format": 1,
                "status": "completed",
                "engine": "cpu",
                "metrics": {"val_accuracy": 0.8},
                "overrides": ["optimizer.lr=0.003"],
            }
        )
    )
    for name, value in (("2", 0.7), ("3", 0.6)):
        _point(
            sweep,
            name,
            {"status": "completed", "engine": "cpu", "metrics": {"val_accuracy": value}},
        )
    with pytest.raises(SystemExit):
        report.main([str(sweep)])
    assert "still to come" not in capsys.readouterr().out  # all four finished


def test_slurm_not_answering_is_one_line_exit_1_and_cancel_records_nothing(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """A point submitted (submitted.json) whose job has not started; no squeue on PATH: the
    table still shows it queued with one line saying Slurm did not answer (exit 1), and
    --cancel says so too, having cancelled and recorded nothing."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "submitted.json").write_text(
        json.dumps({"points": {"0": {"job_id": "41_0", "overrides": []}}, "submissions": []})
    )
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm"))
    with pytest.raises(SystemExit) as exit_:
        status.main([str(sweep)])
    assert exit_.value.code == 1
    shown = capsys.readouterr()
    rows = shown.out.splitlines()
    assert rows[1].split()[:2] == ["0", "queued"] and rows[-1] == "1 point(s): 1 queued"
    (line,) = shown.err.strip().splitlines()
    assert line.startswith("error: Slurm did not answer (squeue not found on PATH"), line
    with pytest.raises(SystemExit) as exit_:
        status.main(["--cancel", str(sweep)])
    assert exit_.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: Slurm did not answer (squeue not found on PATH")
    assert line.endswith("nothing was cancelled")
    assert not (sweep / "cancelled.json").exists()


def test_a_submitted_job_that_left_the_queue_without_a_record_shows_slurms_word(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """A point submitted whose job is no longer queued and never made its directory: Slurm
    accounting's state of the job (sacct, as submitit's job object reads it) is its note."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "submitted.json").write_text(
        json.dumps({"points": {"0": {"job_id": "77_0", "overrides": []}}, "submissions": []})
    )
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    for name, body in {
        "squeue": "exit 0",  # the job has left the queue
        "sacct": 'printf "JobID|State|NodeList\\n77_0|CANCELLED by 0|None assigned\\n"',
    }.items():
        (stand_ins / name).write_text(f"#!/bin/sh\n{body}\n")
        (stand_ins / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(stand_ins))
    status.main([str(sweep)])
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].split()[:2] == ["0", "ended"]
    assert rows[1].endswith("Slurm job 77_0: cancelled, no record written")
