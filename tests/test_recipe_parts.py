"""The parts of a paper's recipe that SpikingJelly's loop does not do itself, each against the
library the paper's code used: timm's Mixup in the loop's mixup place (snn/mixup.py) and a
schedule stepped once per epoch (snn/epoch_schedule.py). Real batches (scikit-learn's digits,
as images and as rate-coded frames), real timm and torch schedulers; no training here (the
presets train in tests/test_recipes.py)."""

from __future__ import annotations

import math

import pytest
import torch

from experiments.errors import ConfigError
from experiments.snn.epoch_schedule import EpochSchedule
from experiments.snn.mixup import TimmMixup

from .conftest import plan_for

DEFAULTS = {
    "mixup_alpha": 0.5,
    "cutmix_alpha": 0.0,
    "mixup_prob": 1.0,
    "mixup_switch_prob": 0.5,
    "mixup_mode": "batch",
    "mixup_off_epoch": None,
}


def _images(count: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    from experiments.data.digits import build_digits_datasets

    train, _ = build_digits_datasets(image_size=16, val_size=64)
    images, targets = train.tensors
    return images[:count].clone(), targets[:count].clone()


def _frames(count: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Rate-coded digit frames [N, T, C, H, W], each sample shifted by its index so that every
    pixel of sample i differs from sample N-1-i (the one batch mode mixes it with)."""
    from experiments.data.digits_sequence import build_digits_sequence_datasets

    train, _ = build_digits_sequence_datasets(time_steps=4, image_size=16, val_size=64)
    frames = torch.stack([train[index][0] for index in range(count)])
    frames = frames * torch.arange(1, 4).view(1, 1, 3, 1, 1)  # channels differ too
    shift = 10.0 * torch.arange(count).view(count, 1, 1, 1, 1)
    return frames + shift, torch.stack([train[index][1] for index in range(count)])


def test_mixed_targets_are_probabilities_and_the_loss_smooths_them_as_timm_does() -> None:
    """Mixup through timm at the loop's place: the images are lam x + (1 - lam) x.flip(0), the
    targets the same mixture of one-hot rows (each sums to 1); torch's cross_entropy with
    label_smoothing (the loss's loss_kwargs) on them equals timm's SoftTargetCrossEntropy on
    timm's own smoothed targets, Spikformer's loss."""
    from timm.data.mixup import mixup_target
    from timm.loss import SoftTargetCrossEntropy

    images, targets = _images()
    mixer = TimmMixup(DEFAULTS, num_classes=10, seed=1)
    mixed, soft = mixer.mix(images.clone(), targets, epoch=0, dp_rank=0, step=3)
    assert soft.shape == (8, 10) and torch.allclose(soft.sum(1), torch.ones(8))
    first = next(i for i in range(8) if targets[i] != targets[7 - i])  # two labels to weigh
    lam = float(soft[first, targets[first]])
    assert 0 < lam < 1
    assert torch.allclose(mixed, lam * images + (1 - lam) * images.flip(0), atol=1e-6)
    logits = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    ours = torch.nn.functional.cross_entropy(logits, soft, label_smoothing=0.1)
    timms = SoftTargetCrossEntropy()(logits, mixup_target(targets, 10, lam, smoothing=0.1))
    assert torch.allclose(ours, timms, atol=1e-6)


def test_mixup_stops_from_its_off_epoch_and_draws_follow_the_step() -> None:
    """mixup_off_epoch=2: epochs 0 and 1 (0-based, as the loop counts) are mixed, epoch 2 is
    not (the targets stay one-hot probabilities). The draws depend on (seed, data-parallel
    rank, step) only: the same step mixes alike on tensor/pipeline peers and after a resume."""
    images, targets = _images()
    mixer = TimmMixup({**DEFAULTS, "mixup_off_epoch": 2}, num_classes=10, seed=1)
    mixed, _ = mixer.mix(images.clone(), targets, epoch=1, dp_rank=0, step=7)
    assert not torch.equal(mixed, images)
    again, _ = mixer.mix(images.clone(), targets, epoch=1, dp_rank=0, step=7)
    assert torch.equal(again, mixed)
    other_rank, _ = mixer.mix(images.clone(), targets, epoch=1, dp_rank=1, step=7)
    assert not torch.equal(other_rank, mixed)
    off, soft = mixer.mix(images.clone(), targets, epoch=2, dp_rank=0, step=8)
    assert torch.equal(off, images)
    assert torch.equal(soft, torch.nn.functional.one_hot(targets, 10).float())


def test_cutmix_cuts_one_box_through_every_frame_and_channel_of_an_event_batch() -> None:
    """Cutmix on [N, T, C, H, W] frames (SpikingJelly's v2.MixUp raises on them; timm cuts
    along the last two dimensions of a 4-D batch): one box in (H, W), the same through every
    time step and channel, filled from sample N-1-i; the target's weight is the box's area."""
    frames, targets = _frames()
    cutmix = {**DEFAULTS, "cutmix_alpha": 1.0, "mixup_switch_prob": 1.0}
    mixer = TimmMixup(cutmix, num_classes=10, seed=0)
    for step in range(20):  # until a draw cuts a box that is neither empty nor whole
        mixed, soft = mixer.mix(frames.clone(), targets, epoch=0, dp_rank=0, step=step)
        changed = mixed != frames
        area = int(changed[0, 0, 0].sum())
        if 0 < area < 16 * 16:
            break
    box = changed[0, 0, 0]
    rows, columns = box.any(1).nonzero().flatten(), box.any(0).nonzero().flatten()
    assert area == len(rows) * len(columns)  # a rectangle
    assert torch.equal(changed, box.expand_as(changed))  # every sample, frame and channel
    assert torch.equal(mixed[:, :, :, box], frames.flip(0)[:, :, :, box])
    lam = 1 - area / (16 * 16)
    expected = lam * torch.nn.functional.one_hot(targets, 10).float()
    expected += (1 - lam) * torch.nn.functional.one_hot(targets.flip(0), 10).float()
    assert torch.allclose(soft, expected, atol=1e-6)


def test_an_odd_last_batch_mixes_all_but_its_last_image() -> None:
    """timm pairs image i with N-1-i and asserts an even batch; SpikingJelly's loader keeps an
    epoch's short last batch: its last image stays unmixed with its own label."""
    images, targets = _images(7)
    mixed, soft = TimmMixup(DEFAULTS, 10, seed=1).mix(images.clone(), targets, 0, 0, 3)
    assert torch.equal(mixed[-1], images[-1]) and not torch.equal(mixed[:6], images[:6])
    assert torch.equal(soft[-1], torch.nn.functional.one_hot(targets[-1], 10).float())
    assert torch.allclose(soft.sum(1), torch.ones(7))


# ------------------------------------------------------------------ schedules


def _optimizer(lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)


def _lrs_per_step(scheduler: EpochSchedule, steps: int) -> list[float]:
    """The lr each optimizer step trains at, as SpikingJelly's loop steps the scheduler."""
    lrs = []
    for _ in range(steps):
        lrs.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.optimizer.step()
        scheduler.step()
    return lrs


def test_spikformers_timm_cosine_stepped_once_per_epoch() -> None:
    """Spikformer CIFAR-10's schedule (timm CosineLRScheduler: warm-up 20 epochs from 1e-5,
    cosine to 1e-5 over 300, then 10 cool-down epochs at 1e-5), stepped per optimizer step by
    the loop: every step of epoch e trains at the lr timm gives epoch e, read from timm's own
    scheduler stepped as Spikformer's train.py steps it (`step(epoch + 1)`)."""
    from timm.scheduler import CosineLRScheduler

    arguments = {"t_initial": 300, "warmup_t": 20, "warmup_lr_init": 1e-5, "lr_min": 1e-5}
    ours = EpochSchedule(_optimizer(5e-4), "timm.scheduler.CosineLRScheduler", 3, **arguments)
    lrs = _lrs_per_step(ours, 310 * 3)
    reference = CosineLRScheduler(_optimizer(5e-4), **arguments)
    for epoch in (0, 1, 10, 19, 20, 21, 150, 299, 300, 309):
        expected = reference.optimizer.param_groups[0]["lr"] if epoch == 0 else None
        if expected is None:
            reference.step(epoch)
            expected = reference.optimizer.param_groups[0]["lr"]
        assert lrs[3 * epoch : 3 * epoch + 3] == [expected] * 3, epoch
    assert lrs[0] == 1e-5 and lrs[-1] == 1e-5  # epoch 0 at warmup_lr; the cool-down at lr_min
    assert math.isclose(
        lrs[3 * 20], 1e-5 + 0.5 * (5e-4 - 1e-5) * (1 + math.cos(math.pi * 20 / 300))
    )


def sew_imagenet_lr(epoch: int) -> float:
    """SEW-ResNet ImageNet: 0.1 annealed over 320 epochs to 0 (recipes.md 2.4)."""
    return 0.05 * (1 + math.cos(math.pi * epoch / 320))


def sew_gesture_lr(epoch: int) -> float:
    """SEW-ResNet DVS128 Gesture: x0.1 every 64 epochs (from its 0.1 here)."""
    return 0.1 * 0.1 ** (epoch // 64)


@pytest.mark.parametrize(
    ("schedule", "arguments", "closed_form"),
    [
        ("CosineAnnealingLR", {"T_max": 320}, sew_imagenet_lr),
        ("StepLR", {"step_size": 64, "gamma": 0.1}, sew_gesture_lr),
    ],
)
def test_sews_torch_schedules_stepped_once_per_epoch(schedule, arguments, closed_form) -> None:
    ours = EpochSchedule(_optimizer(0.1), f"torch.optim.lr_scheduler.{schedule}", 4, **arguments)
    lrs = _lrs_per_step(ours, 320 * 4)
    reference_optimizer = _optimizer(0.1)
    reference = getattr(torch.optim.lr_scheduler, schedule)(reference_optimizer, **arguments)
    by_epoch = []
    for _ in range(320):
        by_epoch.append(reference_optimizer.param_groups[0]["lr"])
        reference_optimizer.step()
        reference.step()
    for epoch in (0, 1, 63, 64, 160, 319):
        assert lrs[4 * epoch : 4 * epoch + 4] == [by_epoch[epoch]] * 4, epoch
        assert math.isclose(by_epoch[epoch], closed_form(epoch), rel_tol=1e-9, abs_tol=1e-12)


def test_a_timm_schedule_in_steps_is_stepped_every_update_and_resumes() -> None:
    """t_in_epochs=false: timm counts optimizer updates (its step_update), each step's lr is
    timm's; a scheduler rebuilt from the state dict at step 7 goes on with the same lrs."""
    from timm.scheduler import CosineLRScheduler

    arguments = {"t_initial": 12, "warmup_t": 3, "warmup_lr_init": 1e-4, "t_in_epochs": False}
    ours = EpochSchedule(_optimizer(1e-2), "timm.scheduler.CosineLRScheduler", 5, **arguments)
    first = _lrs_per_step(ours, 7)
    reference = CosineLRScheduler(_optimizer(1e-2), **arguments)
    expected = [reference.optimizer.param_groups[0]["lr"]]
    for update in range(1, 12):
        reference.step_update(update)
        expected.append(reference.optimizer.param_groups[0]["lr"])
    state = ours.state_dict()
    again = EpochSchedule(_optimizer(1e-2), "timm.scheduler.CosineLRScheduler", 5, **arguments)
    again.load_state_dict(state)
    assert first + _lrs_per_step(again, 5) == expected


def _per_epoch(schedule: str, **arguments: object) -> list[str]:
    """Overrides that make trainer.scheduler an EpochSchedule of `schedule` (default trainer)."""
    return [
        "trainer.scheduler=experiments.snn.epoch_schedule.EpochSchedule",
        f"+trainer.scheduler_kwargs.schedule={schedule}",
        "+trainer.scheduler_kwargs.steps_per_epoch=auto",
        *(f"+trainer.scheduler_kwargs.{key}={value}" for key, value in arguments.items()),
    ]


def test_steps_per_epoch_auto_is_derived_from_the_run() -> None:
    """The digits' 1413 training images in batches of 32: 45 optimizer steps an epoch; on
    ddp x2, 23."""
    schedule = _per_epoch("torch.optim.lr_scheduler.StepLR", step_size=2)
    plan = plan_for(schedule)
    assert plan.training_config.scheduler_kwargs["steps_per_epoch"] == 45
    assert "StepLR stepped once per epoch of 45 optimizer steps" in plan.as_text()
    ddp = ["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"]
    assert plan_for([*schedule, *ddp]).training_config.scheduler_kwargs["steps_per_epoch"] == 23


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.mixup_prob=1.5"], "trainer.mixup_prob=1.5: a probability from 0 to 1"),
        (
            ["trainer.mixup_alpha=0.5", "trainer.mixup_mode=row"],
            "trainer.mixup_mode='row': one of batch, pair, elem",
        ),
        (
            ["trainer.cutmix_alpha=1.0"],
            "trainer.cutmix_alpha=1.0: 0.0 while trainer.mixup_alpha is 0 (no batch is mixed; "
            "cutmix rides the loop's mixup",
        ),
        (
            ["+trainer.loss_kwargs.label_smoothing=1.0"],
            "trainer.loss_kwargs.label_smoothing=1.0: from 0 to < 1",
        ),
        (
            ["+trainer.loss_kwargs.smoothing=0.1"],
            "trainer.loss_kwargs.smoothing=0.1: not an argument of cross_entropy; did you mean "
            "trainer.loss_kwargs.label_smoothing?",
        ),
        (
            ["trainer.loss_function=torch.nn.functional.cross_entropyy"],
            "trainer.loss_function='torch.nn.functional.cross_entropyy': cannot import it",
        ),
        (
            _per_epoch("torch.optim.lr_scheduler.CosineAnnealingLR", T_max=3),
            "trainer.scheduler_kwargs.T_max=3: a number >= trainer.epochs=4: stepped once per "
            "epoch, the cosine reaches its minimum at epoch 3 and climbs back up",
        ),
        (
            _per_epoch("timm.scheduler.CosineLRScheduler", t_inital=3),
            "trainer.scheduler_kwargs.t_inital=3: not an argument of CosineLRScheduler; did you "
            "mean trainer.scheduler_kwargs.t_initial?",
        ),
    ],
)
def test_recipe_keys_are_refused_before_launch_naming_the_key(overrides, message) -> None:
    with pytest.raises(ConfigError) as refused:
        plan_for(overrides)
    assert str(refused.value).startswith(f"invalid config: {message}"), refused.value


def test_the_loop_builds_timms_mixup_only_where_v2_mixup_falls_short() -> None:
    """The object SpikingJelly's loop builds as `v2.MixUp(alpha=..., num_classes=...)` while
    the seam is installed: timm's Mixup for a run with an off epoch or frame batches, the
    library's own v2.MixUp for plain mixup; torchvision's class is back afterwards."""
    from torchvision.transforms import v2

    from experiments.snn.engines.spikingjelly_loop import mixup_in_the_loops_place

    plain = plan_for(["trainer.mixup_alpha=0.5"])
    off = plan_for(["trainer.mixup_alpha=0.5", "trainer.mixup_off_epoch=2"])
    frames = plan_for(["trainer.mixup_alpha=0.5", "data=digits_sequence"])
    for plan, built in ((plain, v2.MixUp), (off, TimmMixup), (frames, TimmMixup)):
        with mixup_in_the_loops_place(plan.trainer, plan.training_config):
            assert type(v2.MixUp(alpha=0.5, num_classes=10)) is built
    assert v2.MixUp.__module__.startswith("torchvision")
    assert "in the loop's mixup place (beyond v2.MixUp: mixup_off_epoch=2)" in off.as_text()
    assert "beyond v2.MixUp: [N, T, C, H, W] frame batches" in frames.as_text()
    assert "mixup      SpikingJelly's v2.MixUp(alpha=0.5) on every batch" in plain.as_text()


def test_timms_adamw_spares_biases_and_norm_weights_from_weight_decay() -> None:
    """optimizer=adamw_timm: the split timm's create_optimizer makes for Spikformer (weight
    decay on the conv and linear weights, none on biases and BatchNorm's 1-D weights), here
    from the model's parameters alone as SpikingJelly's loop passes them; one AdamW step on
    zero gradients shrinks only the decayed weights."""
    from experiments.optimizer import AdamWNoDecayOn1D

    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.Linear(4, 3)
    )
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = AdamWNoDecayOn1D(model.parameters(), lr=0.1, weight_decay=0.06)
    assert [group["weight_decay"] for group in optimizer.param_groups] == [0.06, 0.0]
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    for (name, parameter), old in zip(model.named_parameters(), before, strict=True):
        decayed = not torch.equal(parameter, old)
        assert decayed == (parameter.ndim > 1), name
    plan = plan_for(["optimizer=adamw_timm"])
    assert plan.training_config.optimizer == "experiments.optimizer.AdamWNoDecayOn1D"
