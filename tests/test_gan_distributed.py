"""Distributed GAN training and stops that lose nothing: model.ddp=static on 2 ranks with a
SIGKILLed rank restarted by torchrun (the only restart test: the dynamic-DDP restart test was
folded into it; dynamic DDP on 2 ranks is the Slurm requeue here and test_gan.py's two-rank
run), SIGTERM handled at an iteration boundary (locally and as a real Slurm requeue of a job
over two nodes), and atomic checkpoint writes. Real processes throughout: the CLI, torchrun,
Slurm, signals, SIGKILL. What each rank read is recorded (EXPERIMENTS_TEST_RECORD_READS), not
inferred.

Budget: a 2-rank torchrun run (restarted once), three single-process runs, and a 2-node Slurm
job (requeued once) on the suite's Slurm cluster. Every failure is injected from outside the
package: a signal or `scontrol requeue` from the test, or the test-only sitecustomize in
tests/support/site (EXPERIMENTS_TEST_KILL_DURING_GAN_SAVE).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from experiments.errors import ConfigError
from experiments.gan import ddp as gan_ddp

from .conftest import (
    CLI,
    SITE,
    SLURM_NODES,
    cli_env,
    login_ended_well,
    plan_for,
    read_jsonl,
    run_cli,
    start_now_when_pending,
)
from .recorded_data import read_indices
from .support import processes

pytestmark = pytest.mark.gan

TWO_RANKS = ["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"]
TINY = [
    "model=dcgan",
    "model.batch_size=16",
    "model.log_interval=1",
    "model.checkpoint_interval=2",
    "model.sample_interval=1000",
    "model.num_samples=16",
    "model.eval_images=0",  # no quality metric is read here
]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _checkpoints(run_dir: Path) -> Path:
    return run_dir / "ckpt" / run_dir.name


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")]


def _loads(path: Path) -> bool:
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return False
    return True


# One intra-op thread per process (torchrun gives its workers the same): these runs are tiny,
# and on a machine shared with other work two threads per process wait on each other (measured
# at load ~5-7: the SIGTERM test took 90-100 s with torch's default two threads, 15 s with one).
THREADS = {"OMP_NUM_THREADS": "1"}


def _run(args: list[str], run_dir: Path, env: dict | None = None, timeout: float = 300):
    return run_cli(
        [*args, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        env={**THREADS, **(env or {})},
        timeout=timeout,
    )


def _with_site(**switches: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [SITE, os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, **switches}


# ---------------------------------------------------------------- planning (no process)


@pytest.mark.parametrize(
    ("model", "ddp", "wrapper", "dynamic_runner"),
    [("dcgan", "dynamic", False, True), ("lsgan", "static", True, False)],
)
def test_each_recipe_defaults_to_its_own_ddp_and_model_ddp_switches_it(
    model: str, ddp: str, wrapper: bool, dynamic_runner: bool
) -> None:
    """MMGen's DCGAN recipe inherits the dynamic-DDP runner; its LSGAN recipe asks for the DDP
    wrapper. Our yaml defaults are the recipes' own; model.ddp writes MMGen's keys."""
    plan = plan_for([f"model={model}", *TWO_RANKS])
    cfg = plan.mmgen_config
    assert plan.as_dict()["ddp"] == ddp
    assert bool(cfg.get("use_ddp_wrapper")) == wrapper
    assert cfg.runner.is_dynamic_ddp == dynamic_runner
    assert f"{ddp} DDP (model.ddp)" in plan.as_text()
    other = "static" if ddp == "dynamic" else "dynamic"
    cfg = plan_for([f"model={model}", f"model.ddp={other}", *TWO_RANKS]).mmgen_config
    assert bool(cfg.use_ddp_wrapper) != wrapper
    assert cfg.runner.is_dynamic_ddp != dynamic_runner
    # static: a fixed set of parameters per DDP; dynamic: the reducer finds them per backward
    assert cfg.find_unused_parameters == (other == "dynamic")


def test_static_ddp_is_refused_for_a_dynamic_architecture() -> None:
    """PGGAN grows its networks stage by stage: the static wrapper cannot follow it."""
    pggan = "model.recipe=pggan/pggan_celeba-cropped_128_g8_12Mimgs.py"
    with pytest.raises(ConfigError) as error:
        plan_for(["model=dcgan", pggan, "model.ddp=static", *TWO_RANKS])
    assert (error.value.key, error.value.value) == ("model.ddp", "static")
    message = str(error.value)
    assert "dynamic for pggan/" in message  # the valid choice
    assert "ProgressiveGrowingGAN grows its generator and discriminator" in message  # why
    # By MMGen's class hierarchy: StyleGANv1 grows like PGGAN; the DCGAN family and the
    # class-conditional BigGAN/SNGAN model do not.
    assert gan_ddp.dynamic_reason("StyleGANV1").startswith("StyleGANV1 grows its generator")
    assert gan_ddp.dynamic_reason("StaticUnconditionalGAN") is None
    assert gan_ddp.dynamic_reason("BasiccGAN") is None
    with pytest.raises(ConfigError) as error:
        plan_for(["model=dcgan", "model.ddp=sometimes"])
    assert error.value.key == "model.ddp" and "dynamic" in str(error.value)


def test_a_global_batch_derives_the_per_rank_batch_and_must_divide() -> None:
    """trainer.global_batch_size means for a GAN what it means for an SNN run: the images of
    one update, whatever the world size (MMGen's samples_per_gpu derived from it)."""
    plan = plan_for(["model=dcgan", *TWO_RANKS, "trainer.global_batch_size=32"])
    assert (plan.recipe.batch_size, plan.global_batch) == (16, 32)
    assert plan.mmgen_config.data.samples_per_gpu == 16
    assert "16 per rank, 32 global" in plan.as_text()
    assert plan_for(["model=dcgan", "trainer.global_batch_size=32"]).recipe.batch_size == 32
    with pytest.raises(ConfigError) as error:
        plan_for(["model=dcgan", *TWO_RANKS, "trainer.global_batch_size=15"])
    assert (error.value.key, error.value.value) == ("trainer.global_batch_size", 15)
    assert "a multiple of the 2 data-parallel ranks (e.g. 14 or 16)" in str(error.value)


# ---------------------------------------------------------------- real runs


@pytest.mark.slow
@pytest.mark.dist
def test_static_ddp_ranks_killed_mid_checkpoint_restart_in_step_from_the_newest_readable_one(
    tmp_path: Path,
) -> None:
    """model.ddp=static: MMGen's DDP wrapper (one DDP per generator and discriminator) on gloo
    ranks that read different batches (DistributedSampler), launcher.max_restarts=1. Rank 0 is
    SIGKILLed half-way through writing iter_4.pth (first torchrun round only); torchrun
    restarts both ranks, which resume from iter_2.pth, the newest readable checkpoint, and
    finish with every parameter equal to rank 0's. (Dynamic DDP on 2 ranks: the Slurm test
    here, and test_gan.py's two-rank run.)"""
    run_dir, reads = tmp_path / "run", tmp_path / "reads"
    result = _run(
        [
            *TINY,
            "model.iters=6",
            "model.ddp=static",
            *TWO_RANKS,
            "launcher.max_restarts=1",
            "launcher.monitor_interval=1",
        ],
        run_dir,
        env=_with_site(
            EXPERIMENTS_TEST_KILL_DURING_GAN_SAVE="4", EXPERIMENTS_TEST_RECORD_READS=str(reads)
        ),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # The ranks read different batches (both torchrun rounds; the restarted round's sampler
    # deals the same shares again): no image was read by both ranks. replica_max_diff == 0
    # holds either way.
    indices = read_indices(reads)
    assert sorted(indices) == [0, 1] and min(map(len, indices.values())) >= 6 * 16
    assert not set(indices[0]) & set(indices[1])
    summary = _summary(run_dir)
    assert (summary["status"], summary["world_size"], summary["ddp"]) == ("completed", 2, "static")
    assert summary["metrics"]["replica_max_diff"] == 0.0
    cfg = (run_dir / "mmgen_config.py").read_text().replace(" ", "")
    assert "use_ddp_wrapper=True" in cfg and "is_dynamic_ddp=False" in cfg

    assert (summary["restarts"], summary["start"], summary["resumes"]) == (1, "auto_resume", 1)
    assert summary["start_checkpoint"] == str(_checkpoints(run_dir) / "iter_2.pth")
    assert _steps(run_dir) == [1, 2, 3, 4, 5, 6]  # one record per iteration across the kill
    folder = _checkpoints(run_dir)
    assert _names(folder) == ["iter_2.pth", "iter_4.pth", "iter_6.pth", "latest.pth"]
    assert all(_loads(folder / name) for name in ("iter_2.pth", "iter_4.pth", "iter_6.pth"))
    # The torn write never carried a checkpoint's name: the restarted ranks skipped nothing.
    logs = "".join(p.read_text() for p in run_dir.glob("train_rank*.log"))
    assert "skipping unreadable checkpoint" not in logs
    # The wrapper does not leak into checkpoints: the same keys as a dynamic run's, so either
    # way resumes the other's checkpoints.
    state = torch.load(folder / "iter_6.pth", weights_only=True)["state_dict"]
    assert not [key for key in state if ".module." in key or key.startswith("module.")]


@pytest.mark.slow
def test_a_checkpoint_write_killed_midway_leaves_no_truncated_checkpoint(tmp_path: Path) -> None:
    from experiments.gan.checkpoints import latest_checkpoint

    run_dir = tmp_path / "run"
    result = _run(
        [*TINY, "model.iters=6"], run_dir, env=_with_site(EXPERIMENTS_TEST_KILL_DURING_GAN_SAVE="4")
    )
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    folder = _checkpoints(run_dir)
    # MMGen wrote half of iteration 4's file, under its temporary name only.
    assert _names(folder) == [".iter_4.pth.partial", "iter_2.pth", "latest.pth"]
    torn = folder / ".iter_4.pth.partial"
    assert 0 < torn.stat().st_size < (folder / "iter_2.pth").stat().st_size
    assert not _loads(torn)
    assert os.readlink(folder / "latest.pth") == "iter_2.pth"
    assert latest_checkpoint(run_dir) == folder / "iter_2.pth"  # what a rerun resumes from


@pytest.mark.slow
def test_sigusr2_checkpoints_the_current_iteration_and_the_rerun_resumes_there(
    tmp_path: Path,
) -> None:
    """submitit's SIGUSR2 (the time limit's warning) mid-training, sent to a local run: the
    same stop as SIGTERM (README: "On SIGTERM/SIGUSR2"), whose own test is the Slurm requeue
    below (scontrol requeue sends SIGTERM). The checkpoint interval is longer than the run, so
    before this change the rerun started over. The rerun is also the resume under another
    world size (single -> DDP x2, the global batch kept)."""
    run_dir = tmp_path / "run"
    iters = 40
    args = [*TINY, f"model.iters={iters}", "model.checkpoint_interval=1000"]
    stderr_path = tmp_path / "run.stderr"
    with open(stderr_path, "w") as stderr:
        proc = processes.spawn(
            [CLI, *args, f"hydra.run.dir={run_dir}"],
            cwd=tmp_path,
            env=cli_env(THREADS),
            stderr=stderr,
        )
    deadline = time.time() + 240
    while not ((run_dir / "metrics.jsonl").exists() and len(_steps(run_dir)) >= 2):
        assert proc.poll() is None, stderr_path.read_text()[-3000:]
        assert time.time() < deadline, "no second iteration in 240 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    assert proc.wait(timeout=120) == 128 + signal.SIGUSR2, stderr_path.read_text()[-3000:]

    stopped = _steps(run_dir)[-1]
    assert 2 <= stopped < iters
    summary = _summary(run_dir)
    assert summary["status"] == "interrupted"
    assert "stopped on signal SIGUSR2 after a checkpoint" in summary["interrupted"]
    assert _names(_checkpoints(run_dir)) == [f"iter_{stopped}.pth", "latest.pth"]
    said = f"stopping at iteration {stopped} on signal SIGUSR2; checkpoint saved"
    assert said in (run_dir / "train.log").read_text()

    # Resumed under another world size (#28): two ranks, refused while the global batch
    # would double (nothing written), then at the recorded 16 images an iteration.
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run_dir.rglob("*"))
    refused = _run([*args, *TWO_RANKS], run_dir)
    assert refused.returncode == 2, refused.stderr[-3000:]
    said = refused.stderr.strip().splitlines()
    assert len(said) == 1 and "model.batch_size" in said[0] and "a global batch of 16" in said[0]
    assert "keep it with model.batch_size=8 or trainer.global_batch_size=16" in said[0]
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run_dir.rglob("*")) == before

    result = _run([*args, *TWO_RANKS, "trainer.global_batch_size=16"], run_dir)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = _summary(run_dir)
    assert (summary["status"], summary["start"]) == ("completed", "auto_resume")
    assert (summary["world_size"], summary["batch"]) == (2, {"per_rank": 8, "global": 16})
    assert {"topology.name: single -> ddp", "launcher.name: local -> torchrun"} <= set(
        summary["extensions"]
    )
    assert summary["start_checkpoint"] == str(_checkpoints(run_dir) / f"iter_{stopped}.pth")
    assert summary["metrics"]["replica_max_diff"] == 0.0
    assert _steps(run_dir) == list(range(1, iters + 1))  # nothing lost, nothing twice
    logs = sorted(run_dir.glob("*.log.json"))
    resumed = [r["iter"] for r in read_jsonl(logs[-1]) if r.get("mode") == "train"]
    assert resumed == list(range(stopped + 1, iters + 1))  # MMGen's own log of the rerun


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_requeue_resumes_a_two_task_gan_job_at_the_stopped_iteration(
    slurm_cluster, tmp_path: Path
) -> None:
    """`scontrol requeue` of a running 2-task job on the real cluster, one task on each of its
    two nodes: Slurm sends SIGTERM to both tasks, which agree on the iteration to stop at;
    rank 0 saves it; Slurm starts the job again (restart_count 1) and it resumes there, MMGen's
    DDP over the two nodes keeping the replicas equal. (A plain two-node GAN job, once a test
    of test_multinode.py, ran the same path up to the requeue.)"""
    iters = 40
    args = [
        *TINY,
        f"model.iters={iters}",
        "model.checkpoint_interval=1000",
        "topology=ddp",
        "launcher=slurm",
        "launcher.nodes=2",
        "launcher.tasks_per_node=1",
        "launcher.mem_gb=4",
        "launcher.cpus_per_task=1",
    ]
    sweep = tmp_path / "sweep"
    run_dir = sweep / "0"
    login = tmp_path / "login.log"
    with open(login, "w") as output:  # a file: an unread pipe would fill up and block
        proc = processes.spawn(
            [CLI, *args, f"hydra.sweep.dir={sweep}"],
            cwd=tmp_path,
            env=cli_env(),
            stdout=output,
            stderr=output,
        )
    deadline = time.time() + 300
    while not ((run_dir / "metrics.jsonl").exists() and len(_steps(run_dir)) >= 2):
        assert time.time() < deadline and proc.poll() is None, login.read_text()[-3000:]
        time.sleep(0.1)
    job = _summary(run_dir)["slurm"]["job_id"]
    requeue = processes.run(["scontrol", "requeue", job], timeout=30)
    assert requeue.returncode == 0, requeue.stderr
    start_now_when_pending(job, proc, time.time() + 120)  # not the test cluster's 20 s BeginTime
    login_ended_well(proc, 400, job, sweep, login)

    said = [
        line
        for line in (run_dir / "train_rank0.log").read_text().splitlines()
        if "stopping at iteration" in line
    ]
    assert len(said) == 1 and "on signal SIGTERM; checkpoint saved" in said[0]
    stopped = int(said[0].split("stopping at iteration ")[1].split()[0])
    assert 2 <= stopped < iters
    summary = _summary(run_dir)
    assert (summary["status"], summary["slurm"]["restart_count"]) == ("completed", 1)
    assert (summary["start"], summary["ddp"]) == ("auto_resume", "dynamic")
    assert summary["start_checkpoint"] == str(_checkpoints(run_dir) / f"iter_{stopped}.pth")
    assert Path(summary["start_checkpoint"]).is_file()
    assert _steps(run_dir) == list(range(1, iters + 1))  # nothing lost, nothing twice
    assert summary["world_size"] == 2
    assert summary["metrics"]["replica_max_diff"] == 0.0  # MMGen's DDP kept the replicas equal
    ranks = sorted(summary["ranks"], key=lambda r: r["rank"])
    assert [(r["rank"], r["node"]) for r in ranks] == [(0, SLURM_NODES[0]), (1, SLURM_NODES[1])]
