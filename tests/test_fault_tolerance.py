"""Nothing lost: real processes are killed, checkpoints corrupted, saves interrupted; every run
must end with the step count and losses of an uninterrupted run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import CLI, NO_SPIKES, SITE, Result, cli_env, on_python_path, read_jsonl, run_cli
from .support import gc_records, processes

pytestmark = pytest.mark.slow

BASE = [
    "data=synthetic",
    "data.train_size=256",
    "data.val_size=64",
    "model.time_steps=2",
    "trainer.batch_size=8",
    "trainer.log_every_n_steps=1",
    "trainer.epochs=1",
    "trainer.max_steps=12",
    "trainer.checkpoint_interval=4",
    "trainer.keep_checkpoints=3",
    "seed=5",
    *NO_SPIKES,  # no test here reads spike figures
]


def losses(run_dir: Path) -> list[float]:
    records = read_jsonl(run_dir / "steps.jsonl")
    assert [r["step"] for r in records] == list(range(1, len(records) + 1)), "one record a step"
    return [r["loss"] for r in records]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def train(run_dir: Path, args: list[str], **kwargs) -> Result:
    result = run_cli([*BASE, *args, f"hydra.run.dir={run_dir}"], cwd=run_dir.parent, **kwargs)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def start(run_dir: Path, args: list[str]) -> subprocess.Popen:
    """The run in the background (killed with its workers when the test ends); its stderr
    goes to <run_dir>.stderr, a file, so a chatty run never blocks on a full pipe."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.stderr", "w") as stderr:
        return processes.spawn(
            [CLI, *BASE, *args, f"hydra.run.dir={run_dir}"],
            cwd=run_dir.parent,
            env=cli_env(),
            stderr=stderr,
        )


def wait_for_step(
    run_dir: Path,
    step: int,
    proc: subprocess.Popen,
    timeout: float = 300,
    stderr_file: Path | None = None,
) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        path = run_dir / "steps.jsonl"
        if path.exists() and any(r["step"] >= step for r in read_jsonl(path)):
            return
        if proc.poll() is not None:
            stderr = (stderr_file or run_dir.parent / f"{run_dir.name}.stderr").read_text()
            pytest.fail(f"run ended before step {step}: {stderr[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"step {step} not reached in {timeout} s")


def wait_for_whole_checkpoint(
    run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 120
) -> None:
    """Until the checkpoint of `step` is whole: DCP writes its `.metadata` last. SpikingJelly
    saves in the background while the next steps train, so a slow machine can log step 6
    before step 4's checkpoint is complete; a kill then restarts the run from scratch
    instead of resuming it (CI's stop 63 met exactly that: resumes 0, restarts 1)."""
    seal = run_dir / "checkpoints" / f"step_{step:08d}" / "pp_0000_tp_0000" / ".metadata"
    deadline = time.time() + timeout
    while not seal.is_file():
        assert time.time() < deadline and proc.poll() is None, f"checkpoint {step} never completed"
        time.sleep(0.05)


def kill_at_step(run_dir: Path, step: int, complete: int) -> None:
    """Start the single-process run and SIGKILL it once it has logged `step` and the
    checkpoint of step `complete` is whole (a kill that meets a checkpoint half written is
    test_crash_while_saving...'s case, not this one's)."""
    proc = start(run_dir, [])
    wait_for_step(run_dir, step, proc)
    wait_for_whole_checkpoint(run_dir, complete, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.fixture(scope="module")
def reference(module_tmp: Callable[[str], Path]) -> dict[str, list[float]]:
    """The uninterrupted run: the trajectory every interrupted run must reproduce, and
    (`single_train_loss`) the epoch's mean training loss it reports. (A torchrun rank
    SIGKILLed and restarted, the same under DDP: test_spikingjelly_loop.py's killed rank.)"""
    root = module_tmp("reference")
    train(root / "single", [])
    return {
        "single": losses(root / "single"),
        "single_train_loss": summary(root / "single")["metrics"]["train_loss"],
    }


@pytest.fixture(scope="module")
def killed(module_tmp: Callable[[str], Path]) -> Path:
    """A single-process run SIGKILLed after step 10, its checkpoints of steps 4 and 8 whole:
    the run each checkpoint test below corrupts, resumes or reads (a copy, when it changes
    it: `copy_of`)."""
    run_dir = module_tmp("killed") / "run"
    kill_at_step(run_dir, 10, complete=8)
    return run_dir


def copy_of(killed: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(killed, run_dir)
    return run_dir


def test_same_config_and_seed_give_identical_losses(
    reference: dict[str, list[float]], killed: Path
) -> None:
    """The same config and seed in another process (`killed`, the same command SIGKILLed
    after step 10) took the same steps: bit for bit on the CPU, every step it logged."""
    assert len(reference["single"]) == 12
    again = losses(killed)
    assert len(again) >= 10
    assert again == reference["single"][: len(again)]


def test_killed_process_resumes_on_rerun_onto_the_same_trajectory(
    tmp_path: Path, reference: dict[str, list[float]]
) -> None:
    """Started as a newcomer starts it, without hydra.run.dir (so in a timestamped directory
    a second run of the same command would not find), SIGKILLed after step 6: the line it
    printed as it started names that directory, and running that line resumes there onto
    the uninterrupted trajectory. No second directory is made."""
    work = tmp_path / "work"
    work.mkdir()
    printed = work / "stdout"
    with open(printed, "w") as stdout, open(work / "stderr", "w") as stderr:
        proc = processes.spawn([CLI, *BASE], cwd=work, env=cli_env(), stdout=stdout, stderr=stderr)
    prefix = "To resume this run if it stops: "
    deadline = time.time() + 120
    while not (said := [ln for ln in printed.read_text().splitlines() if ln.startswith(prefix)]):
        assert time.time() < deadline and proc.poll() is None, (work / "stderr").read_text()
        time.sleep(0.05)
    command = shlex.split(said[0].removeprefix(prefix))
    assert command[: len(BASE) + 1] == ["experiments-train", *BASE], command
    (named,) = [w for w in command if w.startswith("hydra.run.dir=")]
    run_dir = work / named.removeprefix("hydra.run.dir=")
    assert run_dir.parent.parent == work / "outputs" / "runs", run_dir  # the timestamped one
    wait_for_step(run_dir, 6, proc, stderr_file=work / "stderr")
    wait_for_whole_checkpoint(run_dir, 4, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert summary(run_dir)["status"] == "running"  # what a killed run leaves behind
    assert summary(run_dir)["resume_command"] == said[0].removeprefix(prefix)
    again = run_cli(command[1:], cwd=work)  # what it printed, as printed
    assert again.returncode == 0, again.stderr[-4000:]
    record = summary(run_dir)
    assert (record["status"], record["metrics"]["steps"], record["resumes"]) == ("completed", 12, 1)
    assert record["resumed_from"].endswith("step_00000004") or record["resumed_from"].endswith(
        "step_00000008"
    )
    assert losses(run_dir) == pytest.approx(reference["single"], rel=1e-6)
    # Resumed mid-epoch (at step 4 or 8 of a 32-step epoch): the epoch's mean training loss
    # covers its steps before the resume too, as the uninterrupted run's does.
    assert record["metrics"]["train_loss"] == pytest.approx(
        reference["single_train_loss"], rel=1e-9
    )
    assert list((work / "outputs" / "runs").glob("*/*")) == [run_dir]


def test_truncated_checkpoint_is_reported_and_the_previous_one_used(
    tmp_path: Path, killed: Path, reference: dict[str, list[float]]
) -> None:
    run_dir = copy_of(killed, tmp_path)  # checkpoints at 4 and 8 are complete
    step = run_dir / "checkpoints" / "step_00000008"
    (shard,) = (step / "pp_0000_tp_0000").glob("*.distcp")  # DCP's data file of the shard
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    result = train(run_dir, [])
    log = result.stdout + (run_dir / "train.log").read_text()
    assert f"checkpoint {step} cannot be loaded" in log
    record = summary(run_dir)
    assert record["resumed_from"].endswith("step_00000004")
    assert record["metrics"]["steps"] == 12
    assert losses(run_dir) == pytest.approx(reference["single"], rel=1e-6)


def test_no_loadable_checkpoint_stops_with_a_clear_error(tmp_path: Path, killed: Path) -> None:
    run_dir = copy_of(killed, tmp_path)
    steps = [run_dir / "checkpoints" / f"step_{step:08d}" for step in (4, 8)]
    for step in steps:
        (shard,) = (step / "pp_0000_tp_0000").glob("*.distcp")
        shard.write_bytes(b"not a checkpoint")
    result = run_cli([*BASE, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 1
    assert "no checkpoint can be loaded" in result.stderr
    assert all(str(step) in result.stderr for step in steps), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    record = summary(run_dir)
    assert record["status"] == "failed" and "no checkpoint can be loaded" in record["error"]


def test_crash_while_saving_leaves_the_previous_checkpoint_as_latest(
    tmp_path: Path, reference: dict[str, list[float]]
) -> None:
    run_dir = tmp_path / "run"
    # The crash is injected by a test-only sitecustomize (tests/support/site), not by the package.
    crashed = run_cli(
        [*BASE, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env={
            "PYTHONPATH": on_python_path(SITE),
            "EXPERIMENTS_TEST_KILL_DURING_SAVE": "8",
            "EXPERIMENTS_TEST_RECORD_GC": str(tmp_path / "gc"),  # the collector at each step
        },
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    gc_records.assert_loops_ran_under_the_start_thresholds(tmp_path / "gc", processes=1)
    checkpoints = run_dir / "checkpoints"
    torn = checkpoints / "step_00000008" / "pp_0000_tp_0000"
    assert list(torn.glob("*.distcp")) and not (torn / ".metadata").exists()  # data, no seal
    assert (checkpoints / "step_00000004" / "pp_0000_tp_0000" / ".metadata").is_file()
    result = train(run_dir, [])
    assert "skipping torn checkpoint" in result.stdout + (run_dir / "train.log").read_text()
    record = summary(run_dir)
    assert record["resumed_from"].endswith("step_00000004")
    assert record["metrics"]["steps"] == 12
    assert (torn / ".metadata").is_file()  # step 8 saved again, whole
    assert losses(run_dir) == pytest.approx(reference["single"], rel=1e-6)


def test_checkpoint_of_a_different_config_is_refused(tmp_path: Path, killed: Path) -> None:
    run_dir = copy_of(killed, tmp_path)
    # In its own run directory, the recorded config refuses the change before launch...
    result = run_cli([*BASE, "optimizer.lr=0.5", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "invalid config: optimizer.lr=0.5" in result.stderr
    # ...and handed to another run, the checkpoint itself refuses, naming what differs.
    newest = run_dir / "checkpoints" / "step_00000008"
    other = tmp_path / "other"
    result = run_cli(
        [*BASE, "optimizer.lr=0.5", f"resume={newest}", f"hydra.run.dir={other}"], cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "written by a different config (differs in: optimizer_kwargs)" in result.stderr
    assert json.loads((other / "summary.json").read_text())["status"] == "failed"


def test_checkpoints_load_without_unpickling_arbitrary_objects(
    tmp_path: Path, killed: Path
) -> None:
    """torch's DCP reads `.metadata` with a plain pickle and a checkpoint's non-tensor values
    with torch.load(weights_only=False). Our readers (the resume, eval's merge) build only
    DCP's metadata classes and state-dict values: a checkpoint crafted to run a command is
    refused, by the reader and by a resume from it, and the command never runs."""
    import pickle

    import torch.distributed.checkpoint as dcp

    from experiments.snn.engines.spikingjelly_checkpoints import read_shard

    path = killed / "checkpoints" / "step_00000004"  # read only: copied where changed
    state = read_shard(path / "pp_0000_tp_0000")
    assert int(state["progress"]["step"]) == 4 and "model" in state
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil_metadata = tmp_path / "evil_metadata"
    shutil.copytree(path, evil_metadata)
    (evil_metadata / "pp_0000_tp_0000" / ".metadata").write_bytes(pickle.dumps(Payload()))
    evil_value = tmp_path / "evil_value"
    shutil.copytree(path, evil_value)
    shutil.rmtree(evil_value / "pp_0000_tp_0000")
    state["optimizer"]["param_groups"][0]["lr"] = Payload()  # a value the resume reads
    dcp.save(state, checkpoint_id=evil_value / "pp_0000_tp_0000", no_dist=True)
    assert not marker.exists()
    refusals = {  # what each reader says: DCP wraps a .metadata it cannot read in its own error
        evil_metadata: "posix.system is not part of a checkpoint's metadata",
        evil_value: "UnpicklingError",
    }
    for evil, said in refusals.items():
        with pytest.raises((pickle.UnpicklingError, AssertionError)) as refused:
            read_shard(evil / "pp_0000_tp_0000")
        assert said in f"{type(refused.value).__name__}: {refused.value}"
        result = run_cli(
            [*BASE, f"resume={evil}", f"hydra.run.dir={tmp_path / evil.name}-run"], cwd=tmp_path
        )
        assert result.returncode == 1, result.stderr[-2000:]
        assert "no checkpoint can be loaded" in result.stderr and said in result.stderr
    assert not marker.exists()
