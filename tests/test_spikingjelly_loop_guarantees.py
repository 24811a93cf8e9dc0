"""Our guarantees on SpikingJelly's own loop (every trainer=default run, on CPU here):
resume from its `step_N/` checkpoints (torn ones skipped), extension of a finished run,
resume=null starting over, experiments-eval on its DCP checkpoints, a Slurm requeue's SIGTERM
saving the step it came in, and the planning refusals (issue 25 item 3, issue 26 items 4-7, 9).
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import time
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.snn.spikes_file import read as read_spikes

from .conftest import (
    CLI,
    NO_SPIKES,
    cli_env,
    login_ended_well,
    plan_for,
    read_jsonl,
    run_cli,
    run_tool,
    sacct_states,
    start_now_when_pending,
)
from .support import processes
from .test_spikingjelly_loop import python_path

pytestmark = [pytest.mark.slow]

SINGLE = [
    "data=synthetic",
    "data.train_size=36",
    "data.val_size=32",
    "model.time_steps=2",
    "optimizer=sgd",
    "optimizer.lr=0.05",
    "trainer.batch_size=8",
    "trainer.epochs=2",
    "trainer.log_every_n_steps=1",
    "trainer.checkpoint_interval=2",
    "trainer.keep_checkpoints=3",
    "seed=5",
]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def train(args: list[str], run_dir: Path, cwd: Path) -> str:
    result = run_cli(
        [*args, f"hydra.run.dir={run_dir}"], cwd=cwd, timeout=300, env={"PYTHONPATH": python_path()}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


def step_folders(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def test_resume_extension_torn_checkpoint_eval_and_fresh_start(tmp_path: Path, figures) -> None:
    """One run's life on SpikingJelly's loop, each stage checked on its files:
    1. 3 steps (max_steps=3; checkpoints at 2 and 3, the last one by our step hook), with a
       CSV logger and the report's train_loss label;
    2. experiments-eval reads its DCP checkpoint and reproduces the final val metrics (1e-6);
    3. a torn newer folder (step_5 without .metadata, as a killed writer leaves it) is
       skipped with one line and removed; raising max_steps to 5 resumes mid-epoch at step 3
       and continues the trajectory of an uninterrupted 5-step run (issue 26 item 4; the
       library alone would raise FileExistsError at step 5); keep_checkpoints=3 prunes;
    4. resume=null starts over: the old step folders go, metrics.jsonl/steps.jsonl hold the
       new run only (issue 26 item 5)."""
    run_dir, straight = tmp_path / "run", tmp_path / "straight"
    output = train([*SINGLE, "trainer.max_steps=3", "logger=csv"], run_dir, tmp_path)
    first = summary(run_dir)
    # the report names SpikingJelly's train_loss for what it is (train.py _report)
    assert "(last epoch mean)" in output and "(last step)" not in output
    # a logger gets the step hook's train/loss per step and the library's epoch record
    with open(run_dir / "csv" / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["step"] for r in rows if r.get("train/loss")] == ["1", "2", "3"]
    epochs = [r for r in rows if r.get("epoch/val_accuracy")]
    assert len(epochs) == 1 and float(epochs[0]["epoch/val_accuracy"]) == pytest.approx(
        first["metrics"]["val_accuracy"]
    )
    assert (first["engine"], first["device"], first["status"]) == (
        "spikingjelly",
        "cpu",
        "completed",
    )
    assert step_folders(run_dir) == ["step_00000002", "step_00000003"]  # the last step too
    assert first["metrics"]["train_loss_kind"] == "last epoch mean"

    evaluated = run_tool(
        "experiments-eval", [str(run_dir)], cwd=tmp_path, env={"PYTHONPATH": python_path()}
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    record = json.loads((run_dir / "eval.json").read_text())
    assert record["checkpoint"].endswith("step_00000003")
    assert abs(record["val_accuracy"] - first["metrics"]["val_accuracy"]) <= 1e-6
    assert abs(record["val_loss"] - first["metrics"]["val_loss"]) <= 1e-6

    torn = run_dir / "checkpoints" / "step_00000005"
    shutil.copytree(run_dir / "checkpoints" / "step_00000003", torn)
    (torn / "pp_0000_tp_0000" / ".metadata").unlink()
    # ... and the killed writer's evaluation at step 5, which spikes.json holds already
    measured = json.loads((run_dir / "spikes.json").read_text())
    measured["evaluations"].append({**measured["evaluations"][-1], "step": 5})
    (run_dir / "spikes.json").write_text(json.dumps(measured))
    output = train([*SINGLE, "trainer.max_steps=5", "logger=csv"], run_dir, tmp_path)
    skipped = [line for line in output.splitlines() if "skipping torn checkpoint" in line]
    assert len(skipped) == 1 and "step_00000005" in skipped[0] and ".metadata" in skipped[0]
    extended = summary(run_dir)
    assert extended["status"] == "completed" and extended["resumes"] == 1
    assert Path(extended["resumed_from"]).name == "step_00000003"
    assert extended["extensions"] and extended["metrics"]["steps"] == 5
    assert step_folders(run_dir) == ["step_00000003", "step_00000004", "step_00000005"]
    # spikes.json, like metrics.jsonl, keeps the evaluations up to the checkpoint, then goes on
    # (the stale step-5 evaluation is gone: the one left is the resumed run's)
    evaluated_at = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]
    assert [r["step"] for r in read_spikes(run_dir)] == evaluated_at and evaluated_at[0] == 3
    train([*SINGLE, "trainer.max_steps=5"], straight, tmp_path)
    losses = [s["loss"] for s in read_jsonl(run_dir / "steps.jsonl")]
    expected = [s["loss"] for s in read_jsonl(straight / "steps.jsonl")]
    assert losses == pytest.approx(expected, rel=1e-6)  # steps 1-5, each once
    assert extended["metrics"]["val_loss"] == pytest.approx(
        summary(straight)["metrics"]["val_loss"], rel=1e-6
    )

    train([*SINGLE, "trainer.max_steps=2", "logger=csv", "resume=null"], run_dir, tmp_path)
    fresh = summary(run_dir)
    assert fresh["status"] == "completed" and fresh["metrics"]["steps"] == 2
    assert step_folders(run_dir) == ["step_00000002"]
    assert [s["step"] for s in read_jsonl(run_dir / "steps.jsonl")] == [1, 2]
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [2]
    assert [r["step"] for r in read_spikes(run_dir)] == [2]
    figures(wall_s=first["wall_time_s"])


# --- planning: refusals and what the dry run says -------------------------------------


def test_cuda_graph_over_several_ranks_is_refused_in_planning() -> None:
    with pytest.raises(ConfigError) as refused:
        plan_for(
            [
                "launcher=slurm",
                "launcher.gpus_per_node=2",
                "launcher.tasks_per_node=2",
                "topology=ddp",
                "trainer.execution_mode=cuda_graph",
            ]
        )
    assert refused.value.key == "trainer.execution_mode"
    assert "single-rank" in str(refused.value)
    single = plan_for(
        ["launcher=slurm", "launcher.gpus_per_node=1", "trainer.execution_mode=cuda_graph"]
    )
    assert single.engine == "spikingjelly" and single.training_config.timing_warmup_steps > 0


def test_engine_choice_and_device_on_a_cpu_machine() -> None:
    auto = plan_for(["data=synthetic"])
    assert (auto.engine, auto.device, auto.backend) == ("spikingjelly", "cpu", "gloo")
    named = plan_for(["data=synthetic", "trainer.engine=spikingjelly"])
    assert (named.engine, named.device) == ("spikingjelly", "cpu")
    assert "spikingjelly on cpu" in auto.as_text()
    assert "nothing lost" in auto.as_text()  # the stop bound, stated by the dry run
    with pytest.raises(ConfigError) as refused:
        plan_for(["trainer.precision=bf16"])
    assert refused.value.key == "trainer.precision" and "needs CUDA" in str(refused.value)


def test_the_retired_cpu_engine_is_refused_in_one_line_naming_what_to_write() -> None:
    with pytest.raises(ConfigError) as refused:
        plan_for(["data=synthetic", "trainer.engine=cpu"])
    assert str(refused.value) == (
        "invalid config: trainer.engine='cpu': auto: our CPU engine is gone; SpikingJelly's "
        "train_classification trains every run of trainer=default, on CPU ranks too (drop the "
        "override, or write trainer.engine=spikingjelly)"
    )


def test_a_single_process_sets_its_own_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    """launcher=local, one process (a one-GPU machine's default run, or a CPU run): nothing
    launched ranks, so the engine gives env:// what it needs itself (issue 26 item 3); what a
    launcher set (torchrun, a Slurm task) stays. The single-topology runs of
    test_spikingjelly_loop.py go through this on CPU."""
    from experiments.snn.engines.spikingjelly import single_process_env

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    env = single_process_env()
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("0", "1", "0")
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
    monkeypatch.setenv("MASTER_PORT", "29555")
    monkeypatch.setenv("RANK", "3")
    assert "MASTER_PORT" not in single_process_env() and "RANK" not in single_process_env()


@pytest.mark.parametrize("ranks", [8, 4, 1])
def test_a_presets_epoch_schedule_follows_the_run_on_any_gpu_count(
    imagefolder: Path, ranks: int
) -> None:
    """SpikingJelly's loop steps the scheduler once per optimizer step (issue 26 item 9); a
    paper's schedule stepped once per epoch (epoch_schedule.EpochSchedule) gets the run's steps
    an epoch, derived under its topology (issue 58). The preset's global batch does not move
    with the GPU count, so neither do the steps of an epoch: 40 images in global batches of 8
    are 5 steps on 1, 4 or 8 ranks."""
    base = ["experiment=sew_resnet34_imagenet", f"data.root={imagefolder}", "data.num_classes=10"]
    ddp = ["topology=ddp", "launcher=torchrun", f"launcher.nproc_per_node={ranks}"]
    plan = plan_for([*base, "trainer.global_batch_size=8", *(ddp if ranks > 1 else [])])
    images = len(list((imagefolder / "train").rglob("*.png")))
    assert plan.training_config.scheduler_kwargs["steps_per_epoch"] == math.ceil(images / 8) == 5
    assert plan.training_config.batch_size == 8 // ranks
    assert "CosineAnnealingLR stepped once per epoch of 5 optimizer steps" in plan.as_text()


def test_a_cosine_shorter_than_the_run_is_refused_before_launch() -> None:
    """The main job's 180 steps (4 epochs of ceil(1413 / 32)); on DDP x2 each rank takes half
    the images, so 92; a T_max that ends before the run is refused, naming the run's steps."""
    main = ["experiment=digits_sew_resnet18"]
    assert plan_for(main).training_config.scheduler_kwargs == {"T_max": 180}
    ddp = [*main, "topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"]
    assert plan_for(ddp).training_config.scheduler_kwargs == {"T_max": 4 * 23}
    capped = plan_for([*main, "trainer.max_steps=50"]).training_config.scheduler_kwargs
    assert capped == {"T_max": 50}
    assert (
        plan_for([*main, "trainer.scheduler_kwargs.T_max=400"]).training_config.scheduler_kwargs[
            "T_max"
        ]
        == 400
    )  # longer than the run: the cosine stops short of 0, as asked
    with pytest.raises(ConfigError) as refused:
        plan_for([*main, "trainer.scheduler_kwargs.T_max=100"])
    assert str(refused.value).startswith(
        "invalid config: trainer.scheduler_kwargs.T_max=100: auto (derives this run's 180 "
        "optimizer steps) or a number >= 180: at step 100 of 180 the cosine reaches its minimum "
        "and climbs back up"
    ), refused.value


# --- Slurm: a requeue's SIGTERM ---------------------------------------------------------


@pytest.mark.slurm
def test_requeue_stops_at_the_signal_step_and_resumes_on_the_same_trajectory(
    slurm_cluster, tmp_path: Path, figures
) -> None:
    """`scontrol requeue` sends SIGTERM to the job's task. The step hook agrees on it, the
    library's own checkpoint is written for the step the signal came in (checkpoint_interval
    is far away: any checkpoint there is the signal's), the loop breaks, the run is recorded
    `interrupted` and the requeued job resumes from it. Then the time limit's signal: SIGUSR2
    (what submitit asks Slurm for `launcher.signal_delay_s` before the limit) to the resumed
    job's task: the same stop at the signal's step, and submitit's own handler requeues the
    job. Both stops lose nothing: each step once, on the uninterrupted run's losses. The same
    job shows what a plain run through the scheduler shows the user: what the job asks for,
    its end, and its Slurm log, found from the run directory."""
    args = [
        *[a for a in SINGLE if not a.startswith(("trainer.checkpoint_interval", "data.train"))],
        "data.train_size=1024",
        "trainer.epochs=1",
        "trainer.max_steps=48",
        "trainer.checkpoint_interval=1000",
        *NO_SPIKES,  # no spike figure is read here
    ]
    reference = tmp_path / "reference"
    result = run_cli(
        [*args, f"hydra.run.dir={reference}"],
        cwd=tmp_path,
        timeout=300,
        env={"PYTHONPATH": python_path(), "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]

    slurm = ["launcher=slurm", "launcher.mem_gb=4", "launcher.cpus_per_task=1"]
    sweep = tmp_path / "sweep"
    log = tmp_path / "login.log"
    with open(log, "w") as output:
        proc = processes.spawn(
            [CLI, *args, *slurm, f"hydra.sweep.dir={sweep}"],
            cwd=tmp_path,
            env=cli_env({"PYTHONPATH": python_path()}),
            stdout=output,
            stderr=output,
        )
    steps = sweep / "0" / "steps.jsonl"
    deadline = time.time() + 240
    while not (steps.exists() and len(steps.read_text().splitlines()) >= 8):
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    job = summary(sweep / "0")["slurm"]["job_id"]
    requeue = processes.run(["scontrol", "requeue", job], timeout=30)
    assert requeue.returncode == 0, requeue.stderr
    start_now_when_pending(job, proc, time.time() + 120)  # not the test cluster's 20 s BeginTime
    rank_log = sweep / "0" / "train_rank0.log"
    deadline = time.time() + 240
    while trained_since_stop(rank_log, steps) < 4:  # resumed, and 4 steps on
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    usr2 = processes.run(["scancel", "--signal=USR2", job], timeout=30)
    assert usr2.returncode == 0, usr2.stderr
    start_now_when_pending(job, proc, time.time() + 120)
    login_ended_well(proc, 300, job, sweep, log)
    record = summary(sweep / "0")
    assert (record["status"], record["metrics"]["steps"], record["resumes"]) == ("completed", 48, 2)
    assert record["engine"] == "spikingjelly" and record["slurm"]["restart_count"] == 2
    said = re.findall(r"stopping at step (\d+) on signal (\d+)", rank_log.read_text())
    assert [signum for _, signum in said] == ["15", "12"], said  # SIGTERM, then SIGUSR2
    stops = [int(step) for step, _ in said]
    assert 8 <= stops[0] < stops[1] < 48  # the signals' steps, not checkpoint_interval multiples
    assert Path(record["resumed_from"]).name == f"step_{stops[1]:08d}"
    losses = [s["loss"] for s in read_jsonl(steps)]
    expected = [s["loss"] for s in read_jsonl(reference / "steps.jsonl")]
    assert losses == pytest.approx(expected, rel=1e-6)
    assert sacct_states(job) == {"COMPLETED"}
    said = log.read_text()
    assert f"Slurm job {job} completed, {sweep / '0'}" in said
    # the submission says what the job asks for, and that an SNN job asking no GPU trains on CPUs
    assert "Slurm job: 1 node(s) x 1 task(s), no GPU (launcher.gpus_per_node=0)" in said
    assert "warning: launcher.gpus_per_node=0: the job asks Slurm for no GPU" in said
    assert Path(record["slurm"]["stdout"]).is_file()  # Slurm's log, found from the run dir
    assert (sweep / "0" / "checkpoints").is_dir() and (sweep / "0" / "metrics.jsonl").exists()
    figures(stopped_at=stops)


def trained_since_stop(rank_log: Path, steps: Path) -> int:
    """Steps recorded past the first stop (0 before it: a run records each step once)."""
    stop = re.search(r"stopping at step (\d+)", rank_log.read_text()) if rank_log.exists() else None
    return len(steps.read_text().splitlines()) - int(stop.group(1)) if stop else 0
