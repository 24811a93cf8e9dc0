"""Submit and walk away (issue 30), on the local Slurm cluster: `launcher.wait=false` returns
while the jobs wait, experiments-status follows them from pending to completed, the report of
a sweep half done counts what is still to come, --cancel cancels and records it, the jobs run
the code copied at submission (not an edit made while they wait), a sweep larger than the
cluster's MaxArraySize goes as several arrays, and launcher.array_parallelism throttles one.

The points wait behind a job of their own (`sleep`, their sbatch dependency), not behind a job
that holds the nodes: the other pytest-xdist worker's Slurm tests keep the cluster meanwhile.
One scenario (a module fixture) serves every test here: three one-step points and one
cancelled point, ~1 min in all.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import (
    BIN,
    NO_SPIKES,
    SLURM_MAX_ARRAY_SIZE,
    TINY_POINT,
    cli_env,
    run_cli,
    sacct_field,
)
from .support import processes

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

TINY = [
    *TINY_POINT,
    "trainer.max_steps=1",
    "launcher=slurm",
    "launcher.mem_gb=2",
    "launcher.cpus_per_task=1",
    "launcher.wait=false",
    *NO_SPIKES,  # no test here reads spike figures
]
PROBE_ENV = "EXPERIMENTS_EDIT_PROBE"
# Appended to the package the login imported, once the jobs are queued: whoever imports the
# edited package with PROBE_ENV set writes its own path into the probe file.
EDIT = (
    "\nimport os as _probe_os  # test_slurm_walk_away: an edit made while jobs wait\n"
    f"if _probe_os.environ.get({PROBE_ENV!r}):\n"
    f"    open(_probe_os.environ[{PROBE_ENV!r}], 'a').write(__file__ + '\\n')\n"
)


def _sbatch_sleep() -> str:
    out = processes.run(
        [
            "sbatch",
            "--parsable",
            "-n1",
            "-c1",
            "--mem=64M",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 240",
        ],
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def _status(*args: str) -> subprocess.CompletedProcess:
    return processes.run([str(BIN / "experiments-status"), *args], timeout=120, env=cli_env())


def _states(sweep: Path) -> dict[str, str]:
    """Each point's state, as experiments-status shows it (its table, in this process)."""
    from experiments import status

    rows = status.table(sweep).splitlines()[1:-1]
    return {row.split()[0]: row.split()[1] for row in rows}


def _wait_for(sweep: Path, done: Callable[[dict[str, str]], bool], timeout: float) -> dict:
    deadline = time.time() + timeout
    while True:
        states = _states(sweep)
        if done(states) or time.time() > deadline:
            return states
        time.sleep(1)


@pytest.fixture(scope="module")
def walk_away(slurm_cluster, module_tmp: Callable[[str], Path]) -> dict:
    import experiments

    root = module_tmp("walk_away")
    probe = root / "probe.txt"
    package_init = Path(experiments.__file__)
    original = package_init.read_bytes()
    blocker = _sbatch_sleep()
    after = f"+launcher.additional_parameters.dependency='afterany:{blocker}'"
    seen: dict = {"blocker": blocker}
    try:
        sweep, cancelled = root / "sweep", root / "cancelled"
        started = time.time()
        login = run_cli(
            [
                "-m",
                *TINY,
                after,
                "seed=1,2,3",
                "launcher.array_parallelism=1",
                f"hydra.sweep.dir={sweep}",
            ],
            cwd=root,
            env={PROBE_ENV: str(probe)},
        )
        seen["login_s"] = time.time() - started
        seen["login"] = login
        assert login.returncode == 0, login.stderr[-3000:]
        seen["submitted"] = json.loads((sweep / "submitted.json").read_text())
        seen["queued"] = _states(sweep)
        command = ["-m", *TINY, after, "seed=1,2,3", "launcher.array_parallelism=1"]
        seen["again"] = run_cli([*command, f"hydra.sweep.dir={sweep}"], cwd=root)  # jobs wait
        seen["submitted_after_again"] = json.loads((sweep / "submitted.json").read_text())
        seen["status_cli"] = _status(str(sweep))
        arrays = seen["submitted"]["submissions"][-1]["arrays"]
        seen["throttle"] = processes.run(["scontrol", "show", "job", arrays[0]], timeout=30).stdout

        # a second submission, cancelled while it waits
        one = run_cli([*TINY, after, f"hydra.sweep.dir={cancelled}"], cwd=root)
        assert one.returncode == 0, one.stderr[-3000:]
        seen["cancel_cli"] = _status("--cancel", str(cancelled))
        seen["cancelled_states"] = _states(cancelled)
        seen["cancelled_job"] = json.loads((cancelled / "submitted.json").read_text())

        # the installed package is edited while the jobs wait; a fresh import sees the edit
        package_init.write_bytes(original + EDIT.encode())
        control = processes.run(
            [str(BIN / "python"), "-c", "import experiments"],
            timeout=120,
            env=cli_env({PROBE_ENV: str(probe)}),
        )
        assert control.returncode == 0, control.stderr
        seen["control_probe"] = probe.read_text() if probe.exists() else ""
        probe.unlink(missing_ok=True)

        processes.run(["scancel", blocker], timeout=30)  # the points may start now
        partly = _wait_for(sweep, lambda s: "completed" in s.values(), 240)
        seen["partly"] = partly
        seen["report_partly"] = processes.run(
            [str(BIN / "experiments-report"), str(sweep)], timeout=120, env=cli_env()
        )
        seen["final"] = _wait_for(
            sweep, lambda s: all(v in ("completed", "failed") for v in s.values()), 300
        )
        seen["status_final"] = _status(str(sweep))
        seen["probe_after_jobs"] = probe.read_text() if probe.exists() else ""
        seen["sweep"], seen["cancelled"] = sweep, cancelled
        return seen
    finally:
        package_init.write_bytes(original)
        processes.run(["scancel", blocker], timeout=30)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_wait_false_submits_records_and_returns_while_the_jobs_wait(walk_away: dict) -> None:
    login, record = walk_away["login"], walk_away["submitted"]
    assert walk_away["login_s"] < 60, walk_away["login_s"]  # seconds, not the jobs' minutes
    assert sorted(record["points"]) == ["0", "1", "2"]
    (submission,) = record["submissions"]
    assert submission["wait"] is False and "seed=1,2,3" in submission["command"]
    for point in record["points"].values():  # (an array of one point is a plain job)
        assert re.fullmatch(r"\d+(_\d+)?", point["job_id"]), point
    assert f"experiments-status {walk_away['sweep']}" in login.stdout
    assert "experiments-status --cancel" in login.stdout
    # the jobs were still waiting when the login had returned: no point had a directory
    assert walk_away["queued"] == {"0": "pending", "1": "pending", "2": "pending"}
    shown = walk_away["status_cli"]
    assert shown.returncode == 0, shown.stderr
    assert "Dependency" in shown.stdout  # Slurm's reason, from squeue
    assert "3 point(s): 3 pending" in shown.stdout


def test_the_same_command_while_its_jobs_wait_is_refused_and_submits_nothing(
    walk_away: dict,
) -> None:
    again = walk_away["again"]
    assert again.returncode == 2, again.stderr[-2000:]
    (line,) = again.stderr.strip().splitlines()
    assert "has Slurm jobs still queued or running" in line, line
    assert f"experiments-status --cancel {walk_away['sweep']}" in line
    assert walk_away["submitted_after_again"] == walk_away["submitted"]  # nothing new queued


def test_status_follows_the_points_to_completed_and_the_report_counts_the_rest(
    walk_away: dict,
) -> None:
    assert "completed" in walk_away["partly"].values()
    partly = walk_away["report_partly"]
    assert partly.returncode == 0, partly.stderr
    left = sum(1 for state in walk_away["partly"].values() if state != "completed")
    if left:  # (the report was read while points were still to come)
        assert "still to come" in partly.stdout, partly.stdout
    assert walk_away["final"] == {"0": "completed", "1": "completed", "2": "completed"}
    final = walk_away["status_final"]
    assert final.returncode == 0 and "3 point(s): 3 completed" in final.stdout
    assert "val_accuracy=" in final.stdout  # each point's objective
    for point in ("0", "1", "2"):
        assert _summary(walk_away["sweep"] / point)["status"] == "completed"


def test_a_sweep_larger_than_max_array_size_is_split_and_throttled(walk_away: dict) -> None:
    record = walk_away["submitted"]
    arrays = record["submissions"][-1]["arrays"]
    assert SLURM_MAX_ARRAY_SIZE == 2 and len(arrays) == 2, arrays  # 3 points: 2 + 1
    by_array: dict[str, list[str]] = {}
    for point, job in sorted(record["points"].items()):
        by_array.setdefault(job["job_id"].split("_")[0], []).append(point)
    assert sorted(map(len, by_array.values())) == [1, 2], by_array
    for point, job in record["points"].items():  # each point ran as the job it was given
        slurm = _summary(walk_away["sweep"] / point)["slurm"]
        ran = slurm["job_id"]
        if slurm["array_job_id"]:
            ran = f"{slurm['array_job_id']}_{slurm['array_task_id']}"
        assert ran == job["job_id"], (point, slurm)
    assert "ArrayTaskThrottle=1" in walk_away["throttle"], walk_away["throttle"]
    # launcher.array_parallelism=1: the two points of one array ran one after the other
    pair = next(points for points in by_array.values() if len(points) == 2)
    first, second = sorted(
        (_summary(walk_away["sweep"] / p) for p in pair), key=lambda s: s["started_at"]
    )
    assert second["started_at"] >= first["finished_at"], (first, second)


def test_jobs_run_the_code_copied_at_submission_not_an_edit_made_while_they_wait(
    walk_away: dict,
) -> None:
    assert walk_away["control_probe"].strip(), "the edit did not reach a fresh import"
    assert walk_away["probe_after_jobs"] == "", walk_away["probe_after_jobs"]
    snapshot = walk_away["submitted"]["submissions"][-1]["snapshot"]
    assert snapshot.startswith(str(walk_away["sweep"] / ".snapshot"))
    for point in ("0", "1", "2"):
        code = _summary(walk_away["sweep"] / point)["slurm"]["snapshot"]
        assert code["path"] == snapshot
        assert code["imported_from"] == str(Path(snapshot) / "site" / "experiments")


def test_cancel_cancels_what_waits_and_records_it(walk_away: dict) -> None:
    said = walk_away["cancel_cli"]
    assert said.returncode == 0, said.stderr
    (job,) = [p["job_id"] for p in walk_away["cancelled_job"]["points"].values()]
    assert f"cancelled 1 Slurm job(s) ({job})" in said.stdout
    record = json.loads((walk_away["cancelled"] / "cancelled.json").read_text())
    assert record["jobs"] == [job] and record["points"] == ["0"]
    assert walk_away["cancelled_states"] == {"0": "cancelled"}
    states = sacct_field(job, "State")
    assert states[0].startswith("CANCELLED"), states
    again = _status("--cancel", str(walk_away["cancelled"]))  # nothing left: says so, exit 0
    assert again.returncode == 0 and "nothing to cancel" in again.stdout
