"""Multi-node for real, on one machine: two emulated Slurm nodes (one slurmd each, started by
scripts/slurm/cluster.sh --nodes 2) and two torchrun agents with a c10d rendezvous.

Every multi-node run is compared with the same run on one node under local torchrun: the
losses and every tensor of the final checkpoint agree (1e-5), and summary.json shows where
each rank ran. The runs are small (SEW-ResNet18, 16x16 synthetic images, T=2) and cached per
module: each reference is trained once. The time-limit test's job, which mostly waits for
Slurm's clock, runs beside the other tests from the module's start (time_limited_job). The GAN
over two Slurm nodes is test_gan_distributed.py's requeue test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from experiments.launchers import slurm_jobs
from experiments.snn.engines.spikingjelly_checkpoints import read_shard
from experiments.status import submitted

from .conftest import (
    CLI,
    NO_SPIKES,
    SITE,
    SLURM_NODES,
    SharedRuns,
    cli_env,
    login_ended_well,
    on_python_path,
    read_jsonl,
    run_cli,
    start_now_when_pending,
    wait_for_job,
)
from .support import gc_records, processes

pytestmark = [pytest.mark.slow]

# SGD with momentum (test_topologies.py says why); 256 images at batch 8 a rank: a 2-rank
# data-parallel epoch is 16 steps.
DDP_STEPS = 16
BASE = [
    "data=synthetic",
    "data.train_size=256",
    "data.val_size=64",
    "model.time_steps=2",
    "trainer.log_every_n_steps=1",
    "seed=3",
    "optimizer=sgd",
    "optimizer.lr=0.05",
    "trainer.batch_size=8",
    "trainer.epochs=1",
    "trainer.checkpoint_interval=4",
    # No test here reads spike figures (nor test_topologies.py's of its fsdp2_tp run, the FSDP2
    # x TP reference).
    *NO_SPIKES,
]
DDP = [*BASE, "topology=ddp", f"trainer.max_steps={DDP_STEPS}"]
# FSDP2 over the nodes, channel TP inside each node: a (dp=2, pp=1, tp=2) mesh of 4 ranks.
FSDP2_TP = [
    *BASE,
    "data.train_size=128",
    "topology=fsdp2",
    "topology.tensor_parallel_size=2",
    "trainer.max_steps=8",
]
SLURM = ["launcher=slurm", "launcher.mem_gb=4", "launcher.cpus_per_task=1"]
TWO_NODES = [*SLURM, "launcher.nodes=2", "launcher.tasks_per_node=1"]
# The FSDP2 x TP job over two Slurm nodes and its single-node reference: runs of the session
# (conftest.SharedRuns) that test_topologies.py (the reference) and test_spikingjelly_loop.py
# (both) read too.
FSDP2_TP_TWO_NODES = [*FSDP2_TP, *SLURM, "launcher.nodes=2", "launcher.tasks_per_node=2"]
FSDP2_TP_ONE_NODE = [*FSDP2_TP, "launcher=torchrun", "launcher.nproc_per_node=4"]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in read_jsonl(run_dir / "steps.jsonl")]


def final_state(run_dir: Path) -> dict[str, torch.Tensor]:
    """The model at the run's last checkpoint, merged from its TP shards by SpikingJelly's own
    merge (which refuses shards that overlap or leave a gap)."""
    from experiments.snn.models.sew_resnet import SEWResNetBuilder, SEWResNetConfig

    record = summary(run_dir)
    step = record["metrics"]["steps"]
    _, pipeline, tensor = record["mesh"]["shape"]
    folder = run_dir / "checkpoints" / f"step_{step:08d}"
    shards = [
        (pp, tp, read_shard(folder / f"pp_{pp:04d}_tp_{tp:04d}")["model"])
        for pp in range(pipeline)
        for tp in range(tensor)
    ]
    config = SEWResNetConfig(depth=18, num_classes=10, image_size=16, time_steps=2)
    return SEWResNetBuilder(config).merge_state_dicts(
        shards, pipeline_size=pipeline, tensor_size=tensor
    )


def assert_same_run(actual: Path, expected: Path, rel: float = 1e-5) -> None:
    got, want = losses(actual), losses(expected)
    assert len(got) == len(want), (len(got), len(want))
    for step, (a, e) in enumerate(zip(got, want, strict=True), start=1):
        assert abs(a - e) <= rel * abs(e), f"step {step}: {a} vs {e}"
    state, reference = final_state(actual), final_state(expected)
    assert set(state) == set(reference)
    for name, tensor in reference.items():
        torch.testing.assert_close(state[name], tensor, rtol=rel, atol=1e-6, msg=name)


class References:
    """The single-node runs the multi-node ones must equal, trained once per module (the
    FSDP2 x TP one once a session: test_topologies.py compares it with its other topologies)."""

    def __init__(self, root: Path, shared: SharedRuns) -> None:
        self.root, self.done = root, {}
        self.shared = shared

    def get(self, name: str, args: list[str]) -> Path:
        if name not in self.done:
            run_dir = self.root / name
            result = run_cli([*args, f"hydra.run.dir={run_dir}"], cwd=self.root, timeout=400)
            assert result.returncode == 0, f"{name}:\n{result.stderr[-4000:]}"
            self.done[name] = run_dir
        return self.done[name]

    def ddp(self) -> Path:
        return self.get("ddp", [*DDP, "launcher=torchrun", "launcher.nproc_per_node=2"])

    def fsdp2_tp(self) -> Path:
        return self.shared.get("fsdp2_tp", FSDP2_TP_ONE_NODE)


@pytest.fixture(scope="module")
def references(module_tmp: Callable[[str], Path], shared_runs: SharedRuns) -> References:
    return References(module_tmp("single_node"), shared_runs)


@pytest.fixture
def foreign_slurm_conf():
    """/etc/slurm/slurm.conf of another cluster, as on a real cluster's login node: the tests'
    clients and jobs must use the test cluster's SLURM_CONF, never this file."""
    path = Path("/etc/slurm/slurm.conf")
    saved = path.read_bytes() if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# a login node's own cluster (not the test cluster)\n"
        "ClusterName=foreign\nSlurmctldHost=foreign-head(10.255.255.1)\n"
        "AuthType=auth/munge\nNodeName=foreign[1-4] CPUs=64\n"
        "PartitionName=batch Nodes=ALL Default=YES\n"
    )
    try:
        yield path
    finally:
        if saved is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(saved)


def slurm_run(tmp_path: Path, args: list[str], **kwargs) -> tuple[Path, object]:
    sweep = tmp_path / "sweep"
    result = run_cli([*args, f"hydra.sweep.dir={sweep}"], cwd=tmp_path, **kwargs)
    return sweep / "0", result


def seconds_to_notice_after_minutes_of_watching(job_id: str, folder: Path) -> float:
    """How long the login's wait (slurm_jobs._wait) takes to see that an ended two-task job
    ended, when its watcher has followed the job for two minutes and asked Slurm a second
    ago: then submitit waits a minute before it asks again. The job is real and has ended;
    only the watcher's clock is set back (a fresh watcher, this check's own)."""
    import submitit
    from submitit.slurm.slurm import SlurmInfoWatcher

    class Watched(submitit.SlurmJob):
        watcher = SlurmInfoWatcher(delay_s=600)

    job = Watched(folder=folder / "watched", job_id=job_id, tasks=(0, 1))  # no result files
    Watched.watcher._start_time = time.time() - 120
    Watched.watcher._last_status_check = time.time() - 1  # (submitit ignores a force < 1 ms)
    started = time.time()
    slurm_jobs._wait(job)
    return time.time() - started


def seconds_to_read_the_outcome(job_id: str, run_dir: Path) -> float:
    """How long the login's `slurm_jobs.outcome` takes on an ended two-task job (a fresh
    submitit handle on the job's own folder, as the login holds)."""
    import submitit

    job = submitit.SlurmJob(folder=run_dir.parent / ".submitit" / "%j", job_id=job_id, tasks=(0, 1))
    started = time.time()
    returned = slurm_jobs.outcome(job, [], run_dir)
    assert returned.return_value != returned.return_value  # NaN: the run failed
    return time.time() - started


def placements(run_dir: Path) -> list[dict]:
    return sorted(summary(run_dir)["ranks"], key=lambda r: r["rank"])


def trains_within(steps: Path, count: int, proc: subprocess.Popen, seconds: float = 240) -> bool:
    """Whether `steps` (a run's steps.jsonl) holds `count` steps before the login `proc`
    ends or `seconds` pass."""
    deadline = time.time() + seconds
    while not (steps.exists() and len(steps.read_text().splitlines()) >= count):
        if time.time() > deadline or proc.poll() is not None:
            return False
        time.sleep(0.2)
    return True


def wait_for_steps(steps: Path, count: int, proc: subprocess.Popen, log: Path) -> None:
    if not trains_within(steps, count, proc):
        # The login reports on stdout, the ranks in their logs: all of it, to read why.
        said = [log, log.with_suffix(".stdout"), *sorted(steps.parent.glob("*.log"))]
        pytest.fail(
            f"the job did not start training (login returned {proc.poll()}):\n"
            + "\n".join(f"--- {p}:\n{p.read_text()[-2000:]}" for p in said if p.is_file())
        )


# ---------------------------------------------------------------- Slurm, two nodes


@pytest.fixture(scope="module")
def fsdp2_tp_on_two_nodes(slurm_cluster, shared_runs: SharedRuns) -> Path:
    """The FSDP2 x TP job over two Slurm nodes (dp=2 x tp=2, 8 images a rank), run once a
    session for the tests of its placement and of its requeue on one node, and for
    test_spikingjelly_loop.py's Slurm test (conftest.SharedRuns)."""
    return shared_runs.get("fsdp2_tp_two_nodes", FSDP2_TP_TWO_NODES, sweep=True)


@pytest.mark.slurm
def test_fsdp2_across_and_tensor_parallel_within_two_slurm_nodes(
    fsdp2_tp_on_two_nodes: Path, references: References
) -> None:
    run_dir = fsdp2_tp_on_two_nodes
    record = summary(run_dir)
    assert (record["status"], record["world_size"], record["mesh"]["shape"]) == (
        "completed",
        4,
        [2, 1, 2],
    )
    ranks = placements(run_dir)
    # TP peers (same dp coordinate) share a node; the two data-parallel replicas do not
    nodes = {
        p["coordinates"]["dp"]: {
            q["node"] for q in ranks if q["coordinates"]["dp"] == p["coordinates"]["dp"]
        }
        for p in ranks
    }
    assert nodes == {0: {SLURM_NODES[0]}, 1: {SLURM_NODES[1]}}, ranks
    assert all(p["dtensor_parameters"] > 0 for p in ranks)  # FSDP2 really sharded
    assert_same_run(run_dir, references.fsdp2_tp())


@pytest.mark.slurm
def test_an_fsdp2_tp_job_back_on_one_node_continues_at_its_global_batch(
    fsdp2_tp_on_two_nodes: Path, tmp_path: Path, figures
) -> None:
    """The two-node FSDP2 x TP job (a global batch of 16) stopped after its step-4 checkpoint
    and submitted again on one node: the same command with launcher.nodes=1 and
    trainer.global_batch_size=16 is channel TP x2 with dp=1, 16 a rank in two accumulated
    micro-batches of 8. Accepted as an extension, its FSDP2 checkpoint loaded into the TP
    ranks, and each continued step trains on the same 16 samples (one sampler permutation).
    What differs is BatchNorm's grouping: a dp rank normalises every other sample of the 16,
    a micro-batch 8 consecutive ones. Measured (2026-12-02, 2-core CPU): the continued losses
    0.4-2.1 % from the uninterrupted run's; asserted within 10 %. The login records the
    extension before submitting: the job plans against the config Hydra rewrote."""
    sweep = tmp_path / "sweep"
    SharedRuns.copy(fsdp2_tp_on_two_nodes.parent, sweep)
    run_dir = sweep / fsdp2_tp_on_two_nodes.name
    shutil.rmtree(run_dir / "checkpoints" / "step_00000008")
    record = summary(run_dir)
    record["status"] = "interrupted"
    (run_dir / "summary.json").write_text(json.dumps(record))
    one_node = [a for a in FSDP2_TP_TWO_NODES if not a.startswith("launcher.nodes=")]
    result = run_cli(
        [*one_node, "launcher.nodes=1", "trainer.global_batch_size=16", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    continued = summary(run_dir)
    assert continued["status"] == "completed" and continued["resumes"] == 1
    assert continued["resumed_from"].endswith("step_00000004"), continued["resumed_from"]
    assert "launcher.nodes: 2 -> 1" in continued["extensions"], continued["extensions"]
    assert continued["world_size"] == 2 and continued["mesh"]["shape"] == [1, 1, 2]
    assert continued["metrics"]["global_batch"] == 16 and continued["metrics"]["steps"] == 8
    assert len({p["node"] for p in continued["ranks"]}) == 1  # both ranks on one node
    got, want = losses(run_dir), losses(fsdp2_tp_on_two_nodes)
    assert got[:4] == want[:4]  # the records before the stop, kept
    assert len(got) == len(want) == 8
    rel = [abs(a - e) / abs(e) for a, e in zip(got[4:], want[4:], strict=True)]
    figures(continued_rel_loss_diff=[round(r, 4) for r in rel])
    for step, (a, e) in enumerate(zip(got[4:], want[4:], strict=True), start=5):
        assert abs(a - e) <= 0.10 * abs(e), f"step {step}: {a} vs {e}"


@pytest.mark.slurm
def test_requeue_of_a_two_node_job_stops_all_ranks_and_resumes_the_trajectory(
    slurm_cluster, references: References, foreign_slurm_conf: Path, tmp_path: Path
) -> None:
    """DDP over two Slurm nodes, requeued mid-training: both ranks stop after the same step,
    the job resumes from it and ends equal to local torchrun on one node, having shown where
    each rank ran; a login node's own /etc/slurm/slurm.conf is never read (the test cluster's
    SLURM_CONF is). One two-node DDP job proves all of it: an uninterrupted one (the test
    this replaced) trained the same job through the same path up to the requeue."""
    sweep, log = tmp_path / "sweep", tmp_path / "login.log"
    with open(log, "w") as output:
        proc = processes.spawn(
            [CLI, *DDP, *TWO_NODES, f"hydra.sweep.dir={sweep}"],
            cwd=tmp_path,
            env=cli_env(),
            stdout=output,
            stderr=output,
        )
    run_dir = sweep / "0"
    wait_for_steps(run_dir / "steps.jsonl", 3, proc, log)
    job = summary(run_dir)["slurm"]["job_id"]
    requeue = processes.run(["scontrol", "requeue", job], timeout=30)
    assert requeue.returncode == 0, requeue.stderr
    start_now_when_pending(job, proc, time.time() + 120)
    login_ended_well(proc, 300, job, sweep, log)
    record = summary(run_dir)
    assert (record["status"], record["resumes"], record["slurm"]["restart_count"]) == (
        "completed",
        1,
        1,
    )
    assert record["world_size"] == 2 and record["slurm"]["nodelist"] == "exp-node[1-2]"
    # rank r ran on node r: the user sees where each rank ran
    assert [
        (p["rank"], p["local_rank"], p["node"], p["node_rank"]) for p in placements(run_dir)
    ] == [
        (0, 0, SLURM_NODES[0], 0),
        (1, 0, SLURM_NODES[1], 1),
    ]
    # both ranks, on both nodes, stopped after the same step and saved it
    stops = {
        rank: [
            line
            for line in (run_dir / f"train_rank{rank}.log").read_text().splitlines()
            if "stopping at step" in line
        ]
        for rank in (0, 1)
    }
    assert len(stops[0]) == len(stops[1]) == 1, stops
    stopped_at = [
        int(lines[0].split("stopping at step ")[1].split()[0]) for lines in stops.values()
    ]
    assert stopped_at[0] == stopped_at[1] < DDP_STEPS
    assert record["resumed_from"].endswith(f"step_{stopped_at[0]:08d}")
    assert_same_run(run_dir, references.ddp())  # each step once, on the same trajectory


TIME_LIMITED = [
    *BASE,
    "topology=ddp",
    "trainer.epochs=1000",
    "trainer.checkpoint_interval=100000",
    *TWO_NODES,
    "launcher.timeout_min=2",
    "launcher.signal_delay_s=45",
    "launcher.max_requeues=1",
]
TIME_LIMIT_TEST = "test_time_limit_checkpoints_requeues_and_ends_interrupted_after_the_last_requeue"


@pytest.fixture(scope="module", autouse=True)
def time_limited_job(
    request: pytest.FixtureRequest, module_tmp: Callable[[str], Path]
) -> Iterator[tuple[Path, subprocess.Popen] | None]:
    """The time-limit test's job (its folder and login), started with the module when that
    test is selected: its ~2.5 minutes are mostly Slurm's clock, its ranks sleeping between
    steps, spent beside the module's other tests instead of on their own (139 s of the
    module's 462 in a clean clone). Its first step is awaited here, before they start: its
    start-up, which Slurm's first signal must not overtake, has the CPU it had alone. Its
    processes end with the module; the test reads what the job left."""
    if not any(item.name == TIME_LIMIT_TEST for item in request.session.items):
        yield None
        return
    try:
        request.getfixturevalue("slurm_cluster")
    except (pytest.skip.Exception, pytest.fail.Exception):
        yield None  # the test asks for the cluster too, and says why it has none
        return
    folder = module_tmp("time_limit")
    with open(folder / "login.stderr", "w") as stderr, open(folder / "login.stdout", "w") as out:
        proc = processes.spawn(
            [CLI, *TIME_LIMITED, f"hydra.sweep.dir={folder / 'sweep'}"],
            cwd=folder,
            # Training only fills the time until Slurm's signal: at a fraction of the CPU. A
            # step and its 3 s sleep are far inside the 38 s between the signal and the limit,
            # and each attempt still trains 8 steps or more (at 0.5 s both ranks trained
            # several times as many, CPU that nothing here reads).
            env=cli_env(
                {
                    "PYTHONPATH": on_python_path(SITE),
                    "EXPERIMENTS_TEST_STEP_SLEEP": "3",
                    # The collector's thresholds at each step of each Slurm task.
                    "EXPERIMENTS_TEST_RECORD_GC": str(folder / "gc"),
                }
            ),
            stdout=out,
            stderr=stderr,
            module=True,
        )
    # Not a failure here: the test fails, with the job's logs, if it never trains.
    trains_within(folder / "sweep" / "0" / "steps.jsonl", 1, proc)
    try:
        yield folder, proc
    finally:
        processes.end(proc)


@pytest.mark.slurm
def test_time_limit_checkpoints_requeues_and_ends_interrupted_after_the_last_requeue(
    slurm_cluster, time_limited_job: tuple[Path, subprocess.Popen] | None
) -> None:
    """A 2-minute job asks for SIGUSR2 45 s before its limit. Slurm sends it at one of its
    periodic checks (seen here: up to 23 s earlier or 7 s later than asked), so 50-82 s into
    the job: after training started (~7 s idle, 12 s under 4x load; with a 75 s ask, 20-55 s
    in, a slow CI day once ended the job after 135 s with no step trained), and 38 s or more
    before the limit for a checkpoint. The ranks checkpoint and submitit requeues the job once
    (launcher.max_requeues=1); the second time no requeue is left, and the run ends as
    interrupted with its checkpoint kept. The job runs from the module's start
    (time_limited_job): when it is requeued during another test, it waits out its BeginTime
    (the cluster's 20 s) instead of being started at once."""
    assert time_limited_job is not None, "time_limited_job starts this test's job"
    folder, proc = time_limited_job
    sweep, log = folder / "sweep", folder / "login.stderr"
    run_dir = sweep / "0"
    wait_for_steps(run_dir / "steps.jsonl", 1, proc, log)
    job = summary(run_dir)["slurm"]["job_id"]
    start_now_when_pending(job, proc, time.time() + 200)
    wait_for_job(proc, 400, job, sweep, log)
    out = (folder / "login.stdout").read_text()
    assert proc.returncode == 1, log.read_text()[-3000:]
    record = summary(run_dir)
    assert record["status"] == "interrupted", record
    assert "timed-out too many times" in record["interrupted"]
    assert (record["resumes"], record["slurm"]["restart_count"]) == (1, 1)
    stops = [
        int(line.split("stopping at step ")[1].split()[0])
        for line in (run_dir / "train_rank0.log").read_text().splitlines()
        if "stopping at step" in line
    ]
    assert len(stops) == 2 and stops[0] < stops[1], stops  # one stop per job, resumed between
    assert record["resumed_from"].endswith(f"step_{stops[0]:08d}")
    kept = run_dir / "checkpoints" / f"step_{stops[1]:08d}"
    assert (kept / "pp_0000_tp_0000" / ".metadata").is_file()  # kept, whole
    assert f"Slurm job {job} interrupted, {run_dir}" in out and "resumes it" in out
    # Both ranks of both attempts: Slurm tasks run the loop under Python's collector.
    gc_records.assert_loops_ran_under_the_start_thresholds(folder / "gc", processes=4)


@pytest.mark.slurm
def test_one_rank_dying_ends_the_two_node_job_with_its_error_and_log(
    slurm_cluster, tmp_path: Path
) -> None:
    """Rank 1 fails before it joins the process group, where rank 0 waits for it (until the
    rendezvous timeout, 30 minutes, were nothing watching): the job ends within a minute, and
    the login process and summary.json name rank 1's error and its log."""
    started = time.time()
    run_dir, result = slurm_run(
        tmp_path,
        [*DDP, *TWO_NODES],
        timeout=240,
        env={"PYTHONPATH": on_python_path(SITE), "EXPERIMENTS_TEST_FAIL_RANK": "1"},
    )
    ended = time.time()
    assert result.returncode == 1, result.stderr[-3000:]
    record = summary(run_dir)
    failure = record["failure"]
    assert (record["status"], failure["rank"], failure["node"]) == ("failed", 1, SLURM_NODES[1])
    assert failure["error"] == "RuntimeError: injected failure on rank 1"
    rank_log = Path(failure["log"])
    assert rank_log == run_dir / "train_rank1.log"
    assert "injected failure on rank 1" in rank_log.read_text()  # the traceback is there
    (record_time,) = [
        json.loads(p.read_text())["time"] for p in (run_dir / "failures").glob("rank_1.json")
    ]
    assert started < record_time and ended - record_time < 60
    # Its peer stopped within a second or two of the record (README): rank 0's watchdog polls
    # the failures folder every second and logs when it stops (the bar leaves room for a day
    # 3x slower than a quiet one; waiting in the collective would take 30 minutes).
    from datetime import datetime

    (line,) = [
        line
        for line in (run_dir / "train_rank0.log").read_text().splitlines()
        if "stopping: rank 1" in line
    ]
    stopped = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert 0 <= stopped - record_time < 5, (line, record_time)
    said = f"rank 1 on {SLURM_NODES[1]}: RuntimeError: injected failure on rank 1"
    assert f"  error: {said} (log: {rank_log})" in result.stdout
    assert "Traceback" not in result.stderr
    # The login sees the job's end within a poll of it (slurm_jobs.POLL_S, 5 s), also when it
    # has watched the job for minutes: submitit's watcher alone would not ask Slurm about a
    # two-task job for up to a minute. (Checked on the ended job, not by the login's return,
    # which on a slow day also holds its own records and plots: 22 s once at 4x slowness.)
    job_id = submitted(run_dir.parent)[run_dir.name]["job_id"]
    assert seconds_to_notice_after_minutes_of_watching(job_id, tmp_path) < slurm_jobs.POLL_S


@pytest.mark.slurm
def test_a_rank_failing_before_its_run_starts_stops_its_waiting_peer(
    slurm_cluster, tmp_path: Path
) -> None:
    """Rank 0 of a 2-task job fails while it plans (before any process group exists); rank 1
    has planned and waits for it in the rendezvous, which would hold the job until its
    timeout (30 minutes; a requeued GAN job hung so when its rank 0 read a record another
    task was rewriting). Rank 0 leaves its failure record, rank 1's watchdog stops it, and
    the job ends within a minute with rank 0's error in summary.json."""
    started = time.time()
    run_dir, result = slurm_run(
        tmp_path,
        [*DDP, *SLURM, "launcher.tasks_per_node=2"],
        timeout=240,
        env={"PYTHONPATH": on_python_path(SITE), "EXPERIMENTS_TEST_FAIL_PLAN_RANK": "0"},
    )
    returned = time.time()
    assert returned - started < 120, result.stderr[-3000:]
    assert result.returncode == 1, result.stderr[-3000:]
    record = summary(run_dir)
    assert record["status"] == "failed", record
    assert "injected planning failure on rank 0" in record["error"], record
    # The login reads the ended job's outcome from task 0 alone, not after submitit's 15 s
    # wait for the result file of rank 1, which its watchdog stopped before it could write
    # one. Timed here on the same ended job, in this process: one sacct call and a pickle
    # read, against a 15 s sleep. (The CLI's wall from the job's end to its return also
    # counts the login's teardown: 6.8 s alone, 22 s once on a loaded CI machine.)
    job_id = submitted(run_dir.parent)[run_dir.name]["job_id"]
    assert seconds_to_read_the_outcome(job_id, run_dir) < 10
    (failure,) = [json.loads(p.read_text()) for p in (run_dir / "failures").glob("rank_*.json")]
    assert failure["rank"] == 0 and "injected planning failure" in failure["error"]
    peer = (run_dir / "train_rank1.log").read_text()
    assert "stopping: rank 0" in peer, peer[-2000:]


# ---------------------------------------------------------------- torchrun, two agents


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_agents(run_dir: Path, extra: list[str] = ()) -> list[subprocess.Popen]:
    """Two torchrun agents on this host as nodes 0 and 1 of one run (one directory)."""
    port = free_port()
    agents = []
    for node_rank in (0, 1):
        with open(run_dir.parent / f"node{node_rank}.stderr", "w") as stderr:
            agents.append(
                processes.spawn(
                    [
                        CLI,
                        *DDP,
                        "launcher=torchrun",
                        "launcher.nnodes=2",
                        "launcher.nproc_per_node=1",
                        f"launcher.node_rank={node_rank}",
                        f"launcher.rdzv_endpoint=127.0.0.1:{port}",
                        *extra,
                        f"hydra.run.dir={run_dir}",
                    ],
                    cwd=run_dir.parent,
                    # one thread a rank, as torchrun sets for several ranks on one agent (the
                    # reference): with one rank an agent, torchrun leaves threads alone
                    env=cli_env({"OMP_NUM_THREADS": "1"}),
                    stderr=stderr,
                )
            )
    return agents


def wait_all(agents: list[subprocess.Popen], run_dir: Path) -> None:
    for node_rank, agent in enumerate(agents):
        agent.wait(timeout=300)
        stderr = (run_dir.parent / f"node{node_rank}.stderr").read_text()
        assert agent.returncode == 0, f"node {node_rank}:\n{stderr[-3000:]}"


@pytest.mark.dist
def test_killed_worker_on_one_node_restarts_both_nodes_and_resumes(
    references: References, tmp_path: Path
) -> None:
    """Two torchrun agents on this host as nodes 0 and 1 of one DDP run; node 1's worker is
    killed mid-training, both nodes' ranks restart, resume and end equal to one agent with
    two ranks. (An uninterrupted two-agent run, once a test of its own, trained the same
    run through the same path up to the kill.)"""
    run_dir = tmp_path / "run"
    agents = two_agents(run_dir, ["launcher.max_restarts=1"])
    deadline = time.time() + 240
    steps = run_dir / "steps.jsonl"
    # killed at step 6 or later, once step 4's checkpoint (written in the background while
    # steps 5, 6, ... train) is whole: a fast machine reaches step 6 before it is
    seal = run_dir / "checkpoints" / "step_00000004" / "pp_0000_tp_0000" / ".metadata"
    while not (steps.exists() and len(steps.read_text().splitlines()) >= 6 and seal.is_file()):
        assert time.time() < deadline and all(a.poll() is None for a in agents)
        time.sleep(0.05)
    os.kill(processes.torchrun_worker(run_dir, "GROUP_RANK=1"), signal.SIGKILL)
    wait_all(agents, run_dir)
    record = summary(run_dir)
    assert (record["status"], record["metrics"]["steps"]) == ("completed", DDP_STEPS)
    assert (record["resumes"], record["restarts"]) == (1, 1)  # both nodes' ranks restarted
    assert record["world_size"] == 2
    assert sorted(p["node_rank"] for p in placements(run_dir)) == [0, 1]
    assert_same_run(run_dir, references.ddp())  # resumed onto the same trajectory
