"""Nothing lost under the failures shared clusters have (issue #31): a full disk while a
checkpoint or a record is written, two writers in one run directory (a second terminal, a
second launch of a running sweep, a Slurm requeue), records cut short, and Ctrl-C at a local
sweep's login.

Real processes, real file systems (a small tmpfs mounted here as root), real fcntl locks.
Runs are tiny (SEW-ResNet18 at 16x16, T=2, batch 8, a few steps); a frozen process (SIGSTOP)
holds a lock as long as a test needs, so no test races a run's speed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.run import lock
from experiments.run.channel import ADDRESS, RecordClient, RecordServer
from experiments.run.record import (
    METRICS,
    STEPS,
    NoSpaceError,
    RecordFiles,
    RunRecorder,
    read_records,
    write_json_atomic,
)

from .conftest import CLI, NO_SPIKES, cli_env, in_ci, read_jsonl, run_cli
from .support import processes

pytestmark = pytest.mark.slow

# One epoch of 8 steps; every step logged and checkpointed, so a stop or a kill at any step
# leaves a checkpoint of that step.
TINY = [
    "trainer.epochs=1",
    "trainer.batch_size=8",
    "data=synthetic",
    "data.train_size=64",
    "data.val_size=16",
    "model.time_steps=2",
    "trainer.log_every_n_steps=1",
    "trainer.checkpoint_interval=1",
    "trainer.keep_checkpoints=1",
]
# TINY for the tests that read no spike figure and fill no disk (conftest.NO_SPIKES). The
# full-disk tests keep the measurement: where their small filesystem fills up depends on
# what the run writes, spikes.json and spikes.png included.
TINY_NO_SPIKES = [*TINY, *NO_SPIKES]


def steps_of(run_dir: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(run_dir / "steps.jsonl")]


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def spawn(args: list[str], cwd: Path, name: str) -> subprocess.Popen:
    """The CLI in the background, its output in files (<cwd>/<name>.out/.err)."""
    with open(cwd / f"{name}.out", "w") as out, open(cwd / f"{name}.err", "w") as err:
        return processes.spawn([CLI, *args], cwd=cwd, env=cli_env(), stdout=out, stderr=err)


def wait_until(condition, proc: subprocess.Popen, what: str, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"the process ended (status {proc.returncode}) before {what}")
        time.sleep(0.05)
    pytest.fail(f"{what}: not within {timeout} s")


def freeze(tag: str, sig: int = signal.SIGSTOP) -> None:
    """SIGSTOP (or SIGCONT) every process of a spawned command: a frozen run keeps its lock
    (and its files) exactly as they are, however fast or slow this machine is."""
    for pid in processes.tagged_pids(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def one_error_line(stderr: str, stdout: str = "") -> str:
    """The one `error:` line (a progress bar may precede it on the same line), and no
    traceback on either stream (the log goes to stdout)."""
    lines = re.findall(r"error: [^\n]*", stderr)
    assert len(lines) == 1, stderr
    for said in (stderr, stdout):
        assert "Traceback" not in said and "HYDRA_FULL_ERROR" not in said, said[-3000:]
    return lines[0]


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path):
    """A tmpfs of its own (as root): a full disk that fills the same way every time. Where
    none can be mounted the test is skipped with the reason, and fails under CI=true."""
    mount = tmp_path / "disk"
    mount.mkdir()

    def mount_tmpfs(size: str) -> None:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            reason = f"cannot mount a tmpfs here ({result.stderr.strip() or 'not root'})"
            if in_ci():
                pytest.fail(f"{reason}: CI must run the full-disk tests as root")
            pytest.skip(reason)

    if os.geteuid() != 0 or shutil.which("mount") is None:
        reason = "mounting a small tmpfs needs root and mount(8)"
        if in_ci():
            pytest.fail(f"{reason}: CI must run the full-disk tests as root")
        pytest.skip(reason)

    def resize(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)

    mount_tmpfs.resize = resize  # type: ignore[attr-defined]
    mount_tmpfs.path = mount  # type: ignore[attr-defined]
    try:
        yield mount_tmpfs
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def stopped_for_space(args: list[str], cwd: Path) -> str:
    """The run's one error line: it exited 1, no traceback on either stream."""
    full = run_cli(args, cwd=cwd)
    assert full.returncode == 1, full.stderr[-3000:]
    return one_error_line(full.stderr, full.stdout)


def resumed_with_space(small_disk, size: str, args: list[str], cwd: Path) -> None:
    """Space back (the tmpfs grown to `size`): the same command exits 0."""
    small_disk.resize(size)
    again = run_cli(args, cwd=cwd)
    assert again.returncode == 0, again.stderr[-3000:]


def test_spikingjellys_loop_on_a_full_disk_fails_in_one_line_and_resumes(
    small_disk, tmp_path: Path
) -> None:
    """The library's own DCP save of step 2 (~90 MB of SEW-ResNet18 and its SGD momentum)
    does not fit on a 150 MB disk that holds step 1's. One line names the folder and the
    bytes (at least the whole checkpoint, not what happened to fit), no traceback; the
    cut-short `step_2/` is removed and step 1's stays the newest whole checkpoint; with
    space back the same command resumes from step 1 and completes, every step logged once."""
    small_disk("150m")
    run_dir = small_disk.path / "sj"
    args = [*TINY, "optimizer=sgd", "trainer.max_steps=2", f"hydra.run.dir={run_dir}"]
    args.append("preflight=false")  # the disk fills mid-run (the preflight would refuse it)
    line = stopped_for_space(args, tmp_path)
    assert "no space left on device writing" in line, line
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and "no space left" in summary["error"], summary
    assert "step_00000002 (it needed at least" in line, line
    needed = int(line.split("it needed at least ")[1].split(" bytes")[0])
    kept = (run_dir / "checkpoints" / "step_00000001").rglob("*")
    whole = sum(f.stat().st_size for f in kept if f.is_file())
    assert needed >= whole > 80 * 2**20, line
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_00000001"]
    assert steps_of(run_dir) == [1, 2]
    resumed_with_space(small_disk, "400m", args, tmp_path)
    summary = summary_of(run_dir)
    assert summary["status"] == "completed", summary
    assert summary["resumed_from"].endswith("step_00000001"), summary
    assert steps_of(run_dir) == [1, 2]


def test_classic_trainer_on_a_full_disk_keeps_its_latest_checkpoint_whole(
    small_disk, tmp_path: Path
) -> None:
    """trainer=classify writes three 128 MB files an epoch (checkpoint_<epoch>,
    checkpoint_latest, checkpoint_max_test_acc1). A 500 MB disk holds epoch 0's three, not
    epoch 1's checkpoint_1.pth: the Trainer's own torch.save would leave a cut-short
    checkpoint_1.pth and a traceback. It fails in one line naming that file and its size,
    nothing partial is left, epoch 0's checkpoint_latest.pth loads, and with space back the
    same command resumes from it and completes."""
    import torch

    small_disk("500m")
    run_dir = small_disk.path / "classify"
    args = [
        "trainer=classify",
        "trainer.epochs=2",
        "trainer.lr_scheduler=step",
        "data=synthetic",
        "data.train_size=16",
        "data.val_size=8",
        "model.time_steps=2",
        "logger=none",
        f"hydra.run.dir={run_dir}",
    ]
    line = stopped_for_space(args, tmp_path)
    assert "no space left on device writing" in line and "checkpoint_1.pth" in line, line
    needed = int(line.split("it needed ")[1].split(" bytes")[0])
    assert needed > 100 * 2**20, line  # the whole file, not what happened to fit
    assert summary_of(run_dir)["status"] == "failed"
    folder = run_dir / "checkpoints" / "pt" / "classify"
    assert sorted(p.name for p in folder.iterdir()) == [
        "checkpoint_0.pth",
        "checkpoint_latest.pth",
        "checkpoint_max_test_acc1.pth",
    ]
    latest = torch.load(folder / "checkpoint_latest.pth", map_location="cpu", weights_only=False)
    assert latest["epoch"] == 0
    resumed_with_space(small_disk, "1200m", args, tmp_path)
    summary = summary_of(run_dir)
    assert summary["status"] == "completed", summary
    assert summary["resumed_from"].endswith("checkpoint_latest.pth"), summary


@pytest.mark.gan
def test_gan_checkpoint_on_a_full_disk_fails_in_one_line_and_resumes(
    small_disk, tmp_path: Path
) -> None:
    """A DCGAN run on a 10 MB disk: MMGen's iter_2.pth (6.3 MB) fits, iter_4.pth does not.
    One line names the file and (at least) its size, the partial file is gone, iter_2.pth is
    whole; with space back the same command resumes from iteration 2 and completes."""
    pytest.importorskip("mmgen", reason="needs MMGeneration (make setup-gan)")
    small_disk("10m")
    run_dir = small_disk.path / "gan"
    args = [
        "model=dcgan",
        "model.iters=4",
        "model.batch_size=16",
        "model.log_interval=1",
        "model.sample_interval=2",
        "model.checkpoint_interval=2",
        "model.num_samples=16",
        "model.eval_images=64",
        f"hydra.run.dir={run_dir}",
        "preflight=false",  # the disk fills mid-run (the preflight would refuse it at launch)
    ]
    line = stopped_for_space(args, tmp_path)
    assert "no space left on device writing" in line and "iter_4.pth (it needed at least" in line
    assert summary_of(run_dir)["status"] == "failed"
    checkpoints = next((run_dir / "ckpt").iterdir())
    assert sorted(p.name for p in checkpoints.iterdir() if p.suffix == ".pth") == [
        "iter_2.pth",
        "latest.pth",
    ], list(checkpoints.iterdir())
    resumed_with_space(small_disk, "40m", args, tmp_path)
    summary = summary_of(run_dir)
    assert summary["status"] == "completed" and summary["start_checkpoint"].endswith("iter_2.pth")


def test_full_disk_mid_record_leaves_the_records_as_they_were(small_disk, tmp_path: Path) -> None:
    """summary.json and metrics.jsonl on a full disk: the write fails with NoSpaceError
    naming the path and its bytes, the file keeps its previous bytes (an append is cut back,
    a replacement's temporary removed), and the records read whole afterwards."""
    small_disk("1m")
    run_dir = small_disk.path / "run"
    recorder = RunRecorder(run_dir, {"overrides": []})
    recorder.start()
    recorder.log_metrics({"step": 1, "epoch": 1, "val_accuracy": 0.5})
    before = {name: (run_dir / name).read_bytes() for name in ("summary.json", METRICS)}
    filler_path = small_disk.path / "filler"
    with open(filler_path, "wb", buffering=0) as filler, pytest.raises(OSError):  # all of it
        while True:
            filler.write(b"\0" * 4096)
    with pytest.raises(NoSpaceError) as appended:
        for step in range(2, 2000):  # the first append needing a new page fails
            recorder.log_metrics(
                {"step": step, "epoch": step, "val_accuracy": 0.5, "pad": "x" * 900}
            )
    assert str(run_dir / METRICS) in str(appended.value) and "it needed" in str(appended.value)
    metrics, problem = read_records(run_dir)["metrics"], read_records(run_dir)["problems"]
    assert problem == [] and metrics[0] == {"step": 1, "epoch": 1, "val_accuracy": 0.5}
    assert (run_dir / METRICS).read_bytes().startswith(before[METRICS])
    with pytest.raises(NoSpaceError) as replaced:
        recorder.finish("completed", metrics={"val_accuracy": 0.5, "pad": "x" * 20000})
    assert "summary.json" in str(replaced.value)
    assert (run_dir / "summary.json").read_bytes() == before["summary.json"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.jsonl", "summary.json"]
    (small_disk.path / "filler").unlink()
    recorder.finish("completed", metrics={"val_accuracy": 0.5})
    assert summary_of(run_dir)["status"] == "completed"


# ---------------------------------------------------------------- one writer per directory


def test_second_run_is_refused_and_a_sigkilled_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    """A run frozen at step 1 holds its directory: the same command in a second terminal is
    refused in one line naming the holder's host and pid, exit 2, and writes nothing. Once the
    holder is SIGKILLed the kernel has dropped its lock: a new run takes it at once. (A new
    run resuming a SIGKILLed one end to end, through this lock, is test_fault_tolerance.py's
    test_killed_process_resumes_on_rerun_onto_the_same_trajectory.)"""
    run_dir = tmp_path / "run"
    args = [*TINY_NO_SPIKES, "trainer.max_steps=3", f"hydra.run.dir={run_dir}"]
    holder = spawn(args, tmp_path, "holder")
    wait_until(lambda: (run_dir / "checkpoints" / "step_00000001").exists(), holder, "step 1")
    freeze(holder.tag)
    written = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}
    second = run_cli(args, cwd=tmp_path)
    assert second.returncode == 2, second.stderr[-3000:]
    line = one_error_line(second.stderr, second.stdout)
    assert f"run directory {run_dir} is in use by host" in line, line
    assert f"pid {holder.pid}" in line, line
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()} == written
    processes.kill(holder, holder.tag)  # SIGKILL: no chance to clean anything up
    assert lock.holder(run_dir) is None
    started = time.monotonic()
    try:
        assert lock.hold(run_dir).record["pid"] == os.getpid()
        assert time.monotonic() - started < lock.GRACE_S  # no waiting on a dead holder
    finally:
        lock.release(run_dir)


def test_a_rank_reporting_to_its_owner_meets_the_owners_full_disk_in_one_line(small_disk) -> None:
    """torchrun's rank 0 writes the record through its owner (run/channel.py): each write is
    answered once it is on disk, and one the owner's disk cannot take comes back to the rank
    as NoSpaceError naming the file, as in a run of one process; the file is as it was."""
    small_disk("1m")
    run_dir = small_disk.path / "run"
    held = lock.hold(run_dir)
    server = RecordServer(RecordFiles(run_dir), held.token)
    try:
        lock.publish(run_dir, **{ADDRESS: server.address})
        rank_0 = RunRecorder(run_dir, {"overrides": []}, files=RecordClient(run_dir, held.token))
        rank_0.start()
        rank_0.log_step({"step": 1, "loss": 2.5})
        assert server.summary is not None and server.summary["status"] == "running"
        assert read_jsonl(run_dir / STEPS) == [{"step": 1, "loss": 2.5}]
        before = (run_dir / "summary.json").read_bytes()
        with open(small_disk.path / "filler", "wb", buffering=0) as filler, pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 4096)
        with pytest.raises(NoSpaceError) as full:
            rank_0.finish("completed", metrics={"pad": "x" * 20000})
        assert str(run_dir / "summary.json") in str(full.value), full.value
        assert (run_dir / "summary.json").read_bytes() == before
    finally:
        server.close()
        lock.release(run_dir)


@pytest.mark.dist
def test_torchrun_ranks_share_their_lock_and_refuse_a_second_run(tmp_path: Path) -> None:
    """A 2-rank torchrun run: its owner, the launching process, holds the directory (its ranks
    report the record to it); a second (local) run of it is refused naming the owner; the
    torchrun run, let go on, completes with every step logged once."""
    run_dir = tmp_path / "run"
    args = [*TINY_NO_SPIKES, "trainer.max_steps=2", f"hydra.run.dir={run_dir}"]
    args += ["launcher=torchrun", "launcher.nproc_per_node=2", "topology=ddp"]
    holder = spawn(args, tmp_path, "tr")
    wait_until(lambda: (run_dir / "steps.jsonl").exists(), holder, "step 1 of torchrun")
    freeze(holder.tag)
    second = run_cli(args, cwd=tmp_path)
    freeze(holder.tag, signal.SIGCONT)
    assert second.returncode == 2, second.stderr[-3000:]
    line = one_error_line(second.stderr, second.stdout)
    assert f"pid {holder.pid}" in line, line
    assert holder.wait(timeout=300) == 0, (tmp_path / "tr.err").read_text()[-3000:]
    assert summary_of(run_dir)["status"] == "completed"
    assert steps_of(run_dir) == [1, 2]


def _hold_as(run_dir: Path, job: str, restart: int, release: Path) -> subprocess.Popen:
    """A process that holds `run_dir` as attempt `restart` of Slurm job `job` (the variables
    a submitit task has) until the file `release` exists, then exits."""
    code = (
        "import time; from pathlib import Path; from experiments.run import lock; "
        f"lock.hold(Path({str(run_dir)!r})); print('held', flush=True)\n"
        f"while not Path({str(release)!r}).exists(): time.sleep(0.02)"
    )
    env = cli_env(
        {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": job, "SLURM_RESTART_COUNT": str(restart)}
    )
    proc = processes.spawn([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_slurm_requeue_takes_its_lock_over_and_other_jobs_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 0 of job 77 holds the directory (and its other tasks join it); job 78 is
    refused naming job 77; attempt 1 of job 77 (a requeue) waits for attempt 0 to end, longer
    than anyone else would wait, and takes the lock over instead of being refused."""
    run_dir, release, joined = tmp_path / "run", tmp_path / "release", tmp_path / "joined"
    joined.touch()
    first = _hold_as(run_dir, "77", 0, release)
    same_job = _hold_as(run_dir, "77", 0, joined)  # another task of the same attempt
    assert same_job.wait(timeout=30) == 0
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    with pytest.raises(lock.RunDirInUse) as refused:
        lock.hold(run_dir)
    assert "Slurm job 77" in str(refused.value) and f"pid {first.pid}" in str(refused.value)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    # Attempt 0 lets go only after a refusal would have come (Slurm is still ending it).
    threading.Timer(lock.GRACE_S + 1.5, release.touch).start()
    try:
        held = lock.hold(run_dir)
        assert first.wait(timeout=30) == 0 and release.exists()
        assert held.record["slurm_restart_count"] == 1, held.record
    finally:
        lock.release(run_dir)
        release.touch()


# ---------------------------------------------------------------- Ctrl-C and broken records


SWEEP = ["-m", "optimizer.lr=0.001,0.002,0.003,0.004", *TINY_NO_SPIKES, "trainer.max_steps=2"]


@pytest.fixture(scope="module")
def interrupted_sweep(module_tmp: Callable[[str], Path]) -> dict:
    """A 4-point local sweep stopped by Ctrl-C (SIGINT to its process group) during point
    1, after a second launch of it was refused; then the same command, which finishes it."""
    root = module_tmp("sweep")
    sweep = root / "sweep"
    args = [*SWEEP, f"hydra.sweep.dir={sweep}"]
    first = spawn(args, root, "first")
    wait_until(lambda: (sweep / "1" / "steps.jsonl").exists(), first, "point 1's first step")
    freeze(first.tag)
    second_launch = run_cli(args, cwd=root)
    freeze(first.tag, signal.SIGCONT)
    os.killpg(first.pid, signal.SIGINT)
    code = first.wait(timeout=240)
    stopped = {
        n: summary_of(sweep / n) for n in ("0", "1") if (sweep / n / "summary.json").exists()
    }
    report = (sweep / "report.md").read_text() if (sweep / "report.md").exists() else ""
    started = [n for n in ("2", "3") if (sweep / n).exists()]  # not even Hydra's .hydra/
    again = run_cli(args, cwd=root)
    return {
        "sweep": sweep,
        "args": args,
        "root": root,
        "second_launch": second_launch,
        "code": code,
        "stderr": (root / "first.err").read_text(),
        "stopped": stopped,
        "report": report,
        "started": started,
        "again": again,
    }


def test_ctrl_c_stops_a_local_sweep_and_the_same_command_finishes_it(interrupted_sweep) -> None:
    s = interrupted_sweep
    refused = s["second_launch"]
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert f"sweep {s['sweep']} is in use by host" in one_error_line(refused.stderr, refused.stdout)
    assert s["code"] == 130, s["stderr"][-3000:]
    assert s["stopped"]["0"]["status"] == "completed"
    point_1 = s["stopped"]["1"]
    assert point_1["status"] == "interrupted", point_1
    assert "SIGINT" in point_1["interrupted"], point_1
    assert s["started"] == [], "a queued point started after Ctrl-C"
    assert "interrupted" in s["report"] and "| 1 |" in s["report"], s["report"]
    assert "The same command continues the sweep" in s["stderr"], s["stderr"][-2000:]
    again = s["again"]
    assert again.returncode == 0, again.stderr[-3000:]
    for point in "0123":
        assert summary_of(s["sweep"] / point)["status"] == "completed", point
        assert steps_of(s["sweep"] / point) == [1, 2], point
    resumed = summary_of(s["sweep"] / "1")
    assert resumed["resumes"] == 1 and "step_0000000" in resumed["resumed_from"]


@pytest.mark.gan
def test_ctrl_c_stops_a_local_gan_sweep_at_a_checkpoint_and_starts_no_queued_point(
    tmp_path: Path,
) -> None:
    """The same Ctrl-C on a sweep of GAN points: MMGen's loop stops at an iteration boundary
    (our stop hook), saves that iteration's checkpoint, the point ends `interrupted` naming
    SIGINT, the queued point never starts, the login exits 130 and says how to continue.
    (The continuation itself is the launcher's, family-blind: the SNN test above.)"""
    pytest.importorskip("mmgen", reason="needs MMGeneration (make setup-gan)")
    sweep = tmp_path / "sweep"
    args = [
        "-m",
        "model=dcgan",
        "seed=1,2",
        "++model.iters=400",
        "++model.batch_size=8",
        "++model.log_interval=1",
        "++model.checkpoint_interval=1000",
        "++model.sample_interval=1000",
        "++model.eval_images=0",
        "logger=none",
        f"hydra.sweep.dir={sweep}",
    ]
    login = spawn(args, tmp_path, "gan")
    metrics = sweep / "0" / "metrics.jsonl"
    wait_until(
        lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2,
        login,
        "point 0's second iteration",
    )
    os.killpg(login.pid, signal.SIGINT)
    code = login.wait(timeout=240)
    stderr = (tmp_path / "gan.err").read_text()
    assert code == 130, stderr[-3000:]
    point = summary_of(sweep / "0")
    assert point["status"] == "interrupted" and "SIGINT" in point["interrupted"], point
    said = [
        line
        for line in (sweep / "0" / "train_rank0.log").read_text().splitlines()
        if "stopping at iteration" in line
    ]
    assert len(said) == 1 and "on signal SIGINT; checkpoint saved" in said[0], said
    stopped = int(said[0].split("stopping at iteration ")[1].split()[0])
    assert 2 <= stopped < 400
    checkpoints = next((sweep / "0" / "ckpt").iterdir())
    assert (checkpoints / f"iter_{stopped}.pth").is_file()
    assert not (sweep / "1").exists(), "a queued point started after Ctrl-C"
    assert "The same command continues the sweep" in stderr, stderr[-2000:]


def test_broken_records_are_a_points_problem_and_resume_rebuilds_them(interrupted_sweep) -> None:
    """Point 0's summary.json and steps.jsonl cut short, point 2's metrics.jsonl cut
    mid-line, point 3's summary from a newer version: experiments-report lists every point,
    each broken one with its one-line problem, and does not stop; the same sweep command
    rebuilds point 0 from its checkpoint (its steps whole again) and refuses point 3's
    directory naming the version that wrote it."""
    s = interrupted_sweep
    sweep = s["sweep"]
    text = (sweep / "0" / "summary.json").read_text()
    (sweep / "0" / "summary.json").write_text(text[: len(text) // 2])
    with open(sweep / "0" / "steps.jsonl", "a") as steps:  # a crash mid-append
        steps.write('{"step": 4, "lo')
    metrics = (sweep / "2" / "metrics.jsonl").read_text()
    (sweep / "2" / "metrics.jsonl").write_text(metrics[: len(metrics) - 20])
    newer = summary_of(sweep / "3")
    newer.update(record_format=99, versions={**newer["versions"], "experiments": "9.9.9"})
    write_json_atomic(sweep / "3" / "summary.json", newer)
    report = subprocess.run(
        [str(Path(CLI).parent / "experiments-report"), str(sweep)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert "Traceback" not in report.stderr, report.stderr
    problems = [line for line in report.stdout.splitlines() if "PROBLEM" in line]
    assert len(problems) == 3, report.stdout
    assert "point 0: summary.json invalid JSON at byte" in problems[0], problems
    assert "point 2: metrics.jsonl: line 1 not a JSON record (cut short?)" in problems[1], problems
    assert "point 3: written by experiments 9.9.9 (record format 99)" in problems[2], problems
    table = (sweep / "report.csv").read_text().splitlines()
    assert len(table) == 5 and "unreadable" in table[1] and "completed" in table[3], table
    status = subprocess.run(
        [str(Path(CLI).parent / "experiments-status"), str(sweep)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    rows = {line.split()[0]: line for line in status.stdout.splitlines()[1:5]}
    assert rows["0"].split()[1] == "unreadable" and "summary.json invalid JSON" in rows["0"]
    assert rows["1"].split()[1] == "completed" and "val_accuracy=" in rows["1"], rows
    assert "metrics.jsonl: line 1 not a JSON record" in rows["2"], rows
    assert rows["3"].split()[1] == "unreadable" and "written by experiments 9.9.9" in rows["3"]
    assert status.stdout.splitlines()[-1] == "4 point(s): 2 completed, 2 unreadable", status.stdout
    again = run_cli(s["args"], cwd=s["root"])
    assert again.returncode == 1, again.stderr[-3000:]  # point 3 was refused
    refusal = f"error: run directory {sweep / '3'} was written by experiments 9.9.9"
    assert refusal in again.stderr, again.stderr[-3000:]
    rebuilt = summary_of(sweep / "0")
    assert rebuilt["status"] == "completed" and rebuilt["resumed_from"].endswith("step_00000002")
    assert steps_of(sweep / "0") == [1, 2]
    assert (sweep / "3" / "summary.json").read_text() == json.dumps(newer, indent=2) + "\n"


@pytest.mark.slurm
def test_ctrl_c_at_a_blocking_slurm_sweep_leaves_its_job_running_and_says_so(
    slurm_cluster, tmp_path: Path
) -> None:
    """Ctrl-C at the login of a launcher=slurm run (a one-point blocking sweep): the login
    writes the report, names the job as left running and how to stop it, and exits 130; the
    job is still running. scancel stops it after a checkpoint (`interrupted`), and the same
    command then finishes the run with every step logged once."""
    sweep = tmp_path / "sweep"
    args = [
        *TINY_NO_SPIKES,
        "trainer.max_steps=4",
        "launcher=slurm",
        "launcher.mem_gb=4",
        "launcher.cpus_per_task=1",
        f"hydra.sweep.dir={sweep}",
    ]
    login = spawn(args, tmp_path, "login")
    wait_until(lambda: (sweep / "0" / "steps.jsonl").exists(), login, "the job's first step")
    job_pids = [  # the job's processes (they carry the login's tag): frozen, so the job
        pid  # cannot finish while the test looks at it
        for pid in processes.tagged_pids(login.tag)
        if b"SLURM_JOB_ID=" in Path(f"/proc/{pid}/environ").read_bytes()
    ]
    assert job_pids
    for pid in job_pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    os.killpg(login.pid, signal.SIGINT)
    assert login.wait(timeout=60) == 130, (tmp_path / "login.err").read_text()[-3000:]
    job = summary_of(sweep / "0")["slurm"]["job_id"]
    said = (tmp_path / "login.err").read_text()
    assert f"left running: {job}" in said and f"scancel {job}" in said, said[-3000:]
    assert (sweep / "report.md").exists()
    state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    assert state.stdout.strip() == "RUNNING", (state.stdout, state.stderr)
    subprocess.run(["scancel", job], check=True, capture_output=True)
    for pid in job_pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    deadline = time.time() + 120
    while summary_of(sweep / "0")["status"] == "running" and time.time() < deadline:
        time.sleep(0.2)
    assert summary_of(sweep / "0")["status"] == "interrupted", summary_of(sweep / "0")
    # as the message says, once the job has ended (the login refuses a sweep whose jobs are
    # still in Slurm's queue: launchers/sweep.py)
    while time.time() < deadline:
        state = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if state not in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING"):
            break
        time.sleep(0.3)
    again = run_cli(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = summary_of(sweep / "0")
    assert summary["status"] == "completed" and summary["resumes"] == 1, summary
    assert steps_of(sweep / "0") == [1, 2, 3, 4]
