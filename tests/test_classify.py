"""trainer=classify: SpikingJelly's classic train_classify.Trainer as the second SNN engine.

One tiny real run through the CLI is shared by the contract and resume tests, and by
test_eval.py's classic-Trainer test (the session's `classify_tiny`, conftest.SharedRuns); DDP
runs its own 2 gloo ranks under torchrun; refusals are plan-level (no process, nothing
written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from experiments.errors import ConfigError
from experiments.snn import classify_plan, spikes_file
from experiments.snn.engines import classify
from experiments.snn.models import build_single_process_model

from .conftest import SITE, SharedRuns, on_python_path, plan_for, read_jsonl, run_cli
from .support import gc_records

TINY = [
    "trainer=classify",
    "trainer.epochs=1",
    # step, not cosa: a cosine schedule cannot be extended (test_more_epochs_resume...)
    "trainer.lr_scheduler=step",
    "data=synthetic",
    "data.train_size=64",
    "data.val_size=32",
    "model.time_steps=2",
    "logger=none",
]
# The name of TINY's run in the session's shared runs (test_eval.py evaluates it).
SHARED = "classify_tiny"


@pytest.fixture(scope="module")
def tiny_run(shared_runs: SharedRuns) -> Path:
    """The session's run of TINY: read here, never changed (a test that extends it works on a
    copy)."""
    return shared_runs.get(SHARED, TINY)


def _summary(run_dir: Path) -> dict:
    import json

    return json.loads((run_dir / "summary.json").read_text())


def _evaluate(state: dict, overrides: list[str]) -> float:
    """Accuracy of a state dict on the run's validation data, built from the config alone."""
    plan = plan_for(overrides)
    config = plan.training_config
    model = build_single_process_model(config.model, torch.device("cpu"), 32)
    model.load_state_dict(state)
    model.eval()
    from spikingjelly.activation_based import functional

    from experiments.data import import_object

    _, val = import_object(config.dataset_builder, "data.builder")(**config.dataset_kwargs)
    images, targets = val.tensors
    with torch.no_grad():
        logits = model(images.unsqueeze(0).repeat(config.model.time_steps, 1, 1, 1, 1)).mean(0)
    functional.reset_net(model)
    return (logits.argmax(1) == targets).float().mean().item()


def _untrained(plan: Any) -> torch.nn.Module:
    """The run's model before its first step: the Trainer seeds (set_deterministic(--seed))
    and then builds through our load_model, nothing drawn in between; so does this."""
    from spikingjelly.activation_based.examples.common.train_classify import set_deterministic

    set_deterministic(plan.seed)
    return build_single_process_model(plan.training_config.model, torch.device("cpu"), 32)


def _training_loss(model: torch.nn.Module, plan: Any) -> float:
    """The Trainer's criterion (label smoothing 0.1) on all the run's training images, in
    training mode (BatchNorm on batch statistics, as the steps saw them)."""
    from spikingjelly.activation_based import functional

    from experiments.data import import_object

    config = plan.training_config
    train, _ = import_object(config.dataset_builder, "data.builder")(**config.dataset_kwargs)
    images, targets = train.tensors
    model.train()
    with torch.no_grad():
        logits = model(images.unsqueeze(0).repeat(config.model.time_steps, 1, 1, 1, 1)).mean(0)
    functional.reset_net(model)
    return torch.nn.functional.cross_entropy(logits, targets, label_smoothing=0.1).item()


def _moved(state: dict, untrained: torch.nn.Module) -> list[str]:
    """The parameters (not BatchNorm's running statistics) that differ from the untrained."""
    names = {name for name, _ in untrained.named_parameters()}
    initial = untrained.state_dict()
    return [name for name in names if not torch.equal(initial[name], state[name])]


@pytest.mark.slow
@pytest.mark.smoke
def test_a_classify_run_keeps_the_run_directory_contract(tiny_run: Path) -> None:
    summary = _summary(tiny_run)
    assert summary["status"] == "completed"
    assert summary["engine"] == "classify" and summary["device"] == "cpu"
    metrics = summary["metrics"]
    for key in ("val_accuracy", "val_loss", "train_loss", "images_per_second"):
        assert isinstance(metrics[key], float), key
    assert 0.0 <= metrics["val_accuracy"] <= 1.0
    assert metrics["steps"] == 2  # 64 images / batch 32, one epoch
    records = read_jsonl(tiny_run / "metrics.jsonl")
    assert [(r["epoch"], r["step"]) for r in records] == [(1, 2)]
    assert records[0]["val_accuracy"] == metrics["val_accuracy"]

    latest = classify_plan.checkpoint_dir(tiny_run) / classify_plan.LATEST
    assert latest.is_file()
    state, step = classify_plan.load_checkpoint(tiny_run)
    assert step == 2
    # The checkpoint is the model that was evaluated last: rebuilt from the config alone,
    # it scores the recorded val_accuracy (readout: mean over T of [T, N, classes]).
    assert _evaluate(state, TINY) == pytest.approx(metrics["val_accuracy"], abs=1e-6)

    # It learned: on the images it trained on, the checkpoint's loss is below the same
    # model's untrained one (measured: 2.312 untrained, 2.275 after the 2 steps; a Trainer
    # that moves no parameter leaves them equal).
    plan = plan_for(TINY)
    before = _training_loss(_untrained(plan), plan)
    model = _untrained(plan)
    model.load_state_dict(state)
    after = _training_loss(model, plan)
    assert after < before - 0.01, (before, after)


@pytest.mark.slow
def test_more_epochs_resume_through_the_trainers_resume(tiny_run: Path, tmp_path: Path) -> None:
    tiny_run = SharedRuns.copy(tiny_run, tmp_path / "run")  # the shared run stays as trained
    before = read_jsonl(tiny_run / "metrics.jsonl")
    again = run_cli([*TINY, f"hydra.run.dir={tiny_run}"], cwd=tiny_run.parent)
    assert again.returncode == 0 and "Run already completed" in again.stdout
    assert _summary(tiny_run).get("resumes", 0) == 0

    longer = [*TINY, "trainer.epochs=2", f"hydra.run.dir={tiny_run}"]
    collector = tmp_path / "gc"
    # The collector's thresholds at each step, recorded by the test-only sitecustomize.
    env = {"PYTHONPATH": on_python_path(SITE), "EXPERIMENTS_TEST_RECORD_GC": str(collector)}
    result = run_cli(longer, cwd=tiny_run.parent, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    gc_records.assert_loops_ran_under_the_start_thresholds(collector, processes=1)
    summary = _summary(tiny_run)
    assert summary["status"] == "completed" and summary["resumes"] == 1
    assert summary["resumed_from"].endswith(f"pt/classify/{classify_plan.LATEST}")
    assert summary["metrics"]["steps"] == 4
    records = read_jsonl(tiny_run / "metrics.jsonl")
    # epoch 1 was not trained again: its record is the first run's, epoch 2 follows it
    assert records[0] == before[0]
    assert [(r["epoch"], r["step"]) for r in records] == [(1, 2), (2, 4)]
    _, step = classify_plan.load_checkpoint(tiny_run)
    assert step == 4


@pytest.mark.slow
def test_test_only_evaluates_a_trained_checkpoint(tiny_run: Path) -> None:
    """--test-only with --resume: the Trainer scores the checkpoint, trains nothing."""
    run_dir = tiny_run.parent / "test_only"
    result = run_cli(
        [*TINY, "trainer.test_only=true", f"resume={tiny_run}", f"hydra.run.dir={run_dir}"],
        cwd=tiny_run.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = _summary(run_dir)["metrics"]
    assert metrics["val_accuracy"] == _summary(tiny_run)["metrics"]["val_accuracy"]
    assert metrics["steps"] == 0 and not (run_dir / "metrics.jsonl").exists()


@pytest.mark.slow
def test_ddp_on_two_gloo_ranks_keeps_the_replicas_equal(tmp_path: Path) -> None:
    run_dir = tmp_path / "ddp"
    overrides = [*TINY, "topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"]
    result = run_cli([*overrides, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = _summary(run_dir)
    assert summary["world_size"] == 2 and summary["backend"] == "gloo"
    metrics = summary["metrics"]
    assert metrics["steps"] == 1 and metrics["global_batch"] == 64  # 64 images over 2 ranks
    # Each rank trained on its own half of the data: only all-reduced gradients keep the
    # two replicas' parameters identical. That holds trivially for replicas that never move:
    # the step moved every parameter away from the untrained model first.
    assert metrics["replica_max_diff"] == 0.0
    state, _ = classify_plan.load_checkpoint(run_dir)
    untrained = _untrained(plan_for(overrides))
    assert len(_moved(state, untrained)) == len(list(untrained.parameters()))
    assert len(read_jsonl(run_dir / "metrics.jsonl")) == 1
    # the spike measurement's slice (the 32 validation images) counted once: 16 a rank, summed
    (measured,) = spikes_file.read(run_dir)
    assert measured["images"] == 32 and measured["step"] == 1
    assert metrics["firing_rate"] == measured["firing_rate"] > 0


def test_the_time_dimension_is_made_by_the_hooks() -> None:
    """Images are repeated over T; an [N, T, C, H, W] sequence goes time-first, in order."""
    trainer = classify._trainer_class().__new__(classify._trainer_class())
    trainer.time_steps = 3
    images = torch.randn(5, 3, 4, 4)
    repeated = trainer.preprocess_train_sample(None, images)
    assert repeated.shape == (3, 5, 3, 4, 4) and torch.equal(repeated[2], images)
    sequence = torch.randn(5, 3, 3, 4, 4)  # [N, T, C, H, W]
    timed = trainer.preprocess_test_sample(None, sequence)
    assert timed.shape == (3, 5, 3, 4, 4)
    assert all(torch.equal(timed[t], sequence[:, t]) for t in range(3))
    output = torch.randn(3, 5, 10)  # [T, N, classes]
    assert torch.equal(trainer.process_model_output(None, output), output.mean(0))


def test_sync_bn_keeps_spikingjellys_multistep_batch_norm() -> None:
    """torch's convert_sync_batchnorm (the Trainer's --sync-bn) on SpikingJelly's multi-step
    layers computes what they computed before: BatchNorm over [T*N, C, H, W], not over T as
    the batch (SyncBatchNorm without a process group normalises locally, so this runs on
    CPU)."""
    from spikingjelly.activation_based import layer, neuron

    model = torch.nn.Sequential(
        layer.Conv2d(3, 8, 3, step_mode="m"),
        layer.BatchNorm2d(8, step_mode="m"),
        neuron.LIFNode(step_mode="m"),
        layer.Conv2d(8, 4, 3, step_mode="m"),
        layer.BatchNorm2d(4, step_mode="m"),
    )
    x = torch.rand(2, 5, 3, 8, 8)  # [T, N, C, H, W]
    from spikingjelly.activation_based import functional

    expected = model(x)
    functional.reset_net(model)
    with classify._multistep_sync_bn():
        converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert sum(isinstance(m, torch.nn.SyncBatchNorm) for m in converted.modules()) == 2
    assert torch.allclose(converted(x), expected, atol=1e-6)
    assert "convert_multistep" not in repr(torch.nn.SyncBatchNorm.convert_sync_batchnorm)


def test_a_sequence_dataset_plans_time_first() -> None:
    plan = plan_for(["trainer=classify", "data=digits_sequence", "model.time_steps=4"])
    assert plan.engine == "classify"
    assert plan.training_config.input_layout == "NTCHW"


def test_the_trainers_arguments_come_from_our_groups() -> None:
    plan = plan_for(
        [
            "trainer=classify",
            "optimizer=sgd",
            "optimizer.lr=0.05",
            "trainer.label_smoothing=0.2",
            "trainer.mixup_alpha=0.2",
            "trainer.model_ema=true",
            "trainer.clip_grad_norm=1.0",
            "trainer.lr_warmup_epochs=1",
        ]
    )
    args = classify_plan.parse_arguments(plan.trainer_args)
    assert (args.opt, args.lr, args.momentum) == ("sgd", 0.05, 0.9)
    assert (args.label_smoothing, args.mixup_alpha, args.cutmix_alpha) == (0.2, 0.2, 0.0)
    assert args.model_ema and args.clip_grad_norm == 1.0 and args.lr_warmup_epochs == 1
    assert args.device == "cpu" and args.disable_amp and args.seed == 1234
    assert args.output_dir == "/tmp/experiments-test-run/checkpoints"


REFUSED = [
    (["+trainer.auto_augment=ta_wide"], "trainer.auto_augment", "not a key of trainer=classify"),
    (["+trainer.max_steps=3"], "trainer.max_steps", "not a key of trainer=classify"),
    (["trainer.lr_scheduler=poly"], "trainer.lr_scheduler", "one of step, cosa, exp"),
    (["trainer.lr_warmup_method=cosine"], "trainer.lr_warmup_method", "one of linear, constant"),
    (["trainer.lr_warmup_epochs=4"], "trainer.lr_warmup_epochs", "below trainer.epochs=4"),
    (["trainer.precision=amp"], "trainer.precision", "needs CUDA"),
    (["trainer.execution_mode=cuda_graph"], "trainer.execution_mode", "needs CUDA"),
    (["trainer.device=cuda"], "trainer.device", "cpu or auto"),
    (["trainer.sync_bn=true"], "trainer.sync_bn", "SyncBatchNorm needs DDP ranks"),
    (
        ["trainer.sync_bn=true", "topology=ddp", "launcher=torchrun"],
        "trainer.sync_bn",
        "CUDA tensors only",
    ),
    (["trainer.model_ema_decay=1.5"], "trainer.model_ema_decay", "between 0 and 1"),
    (["trainer.clip_grad_norm=0"], "trainer.clip_grad_norm", "a number > 0"),
    (["trainer.label_smoothing=1.0"], "trainer.label_smoothing", "from 0 to < 1"),
    (["topology=fsdp2", "launcher=torchrun"], "topology", "single or ddp"),
    (["topology=channel_tp", "launcher=torchrun"], "topology", "single or ddp"),
    (["topology=pp", "launcher=torchrun"], "topology", "single or ddp"),
    (["model.step_mode=s"], "model.step_mode", "m: the classic Trainer"),
    (["resume=/nonexistent/run"], "resume", "a checkpoint of trainer=classify"),
    (["trainer.test_only=true"], "resume", "a trained checkpoint with trainer.test_only=true"),
    (
        ["data=digits_sequence", "trainer.cutmix_alpha=1.0"],
        "trainer.cutmix_alpha",
        "[N, T, C, H, W] sequences",
    ),
]


@pytest.mark.parametrize(("overrides", "key", "reason"), REFUSED)
def test_what_the_trainer_cannot_run_is_refused_in_planning(
    overrides: list[str], key: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        plan_for(["trainer=classify", *overrides])
    assert raised.value.key == key, str(raised.value)
    assert reason in str(raised.value)


def test_a_cosine_run_is_not_extended_at_lr_zero(tmp_path: Path) -> None:
    """More epochs on a recorded cosa run would resume its finished schedule (lr 0 from
    then on): refused, while a step schedule extends (test_more_epochs_resume...)."""
    from omegaconf import OmegaConf

    from .conftest import compose_run

    recorded = [*TINY, "trainer.lr_scheduler=cosa"]
    cfg = compose_run(recorded)
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, tmp_path / ".hydra/config.yaml")
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(ConfigError) as raised:
        plan_for([*recorded, "trainer.epochs=3"], run_dir=str(tmp_path))
    assert raised.value.key == "trainer.epochs" and "lr 0" in str(raised.value)
    plan_for(recorded, run_dir=str(tmp_path))  # the recorded run itself plans
