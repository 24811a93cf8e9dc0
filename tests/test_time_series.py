"""`data=digits_sequence`: digits as rate-coded frame sequences, batches [N, T, C, H, W]
(SpikingJelly's input_layout="NTCHW"), fed to the model time-first, frame by frame."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from experiments.data.digits import build_digits_datasets
from experiments.data.digits_sequence import build_digits_sequence_datasets
from experiments.errors import ConfigError

from .conftest import REPO, on_python_path, plan_for, run_cli

SJ = "spikingjelly.activation_based."


def test_frames_are_seeded_binary_and_follow_the_intensity() -> None:
    train, val = build_digits_sequence_datasets(time_steps=3, val_size=64, encoding_seed=5)
    frames, target = train[0]
    assert frames.shape == (3, 3, 16, 16) and frames.dtype == torch.float32
    assert set(frames.unique().tolist()) <= {0.0, 1.0}
    assert target.dtype == torch.int64 and len(val) == 64
    again, _ = build_digits_sequence_datasets(time_steps=3, val_size=64, encoding_seed=5)
    other, _ = build_digits_sequence_datasets(time_steps=3, val_size=64, encoding_seed=6)
    assert torch.equal(train.frames, again.frames)  # same seed, same frames
    assert not torch.equal(train.frames, other.frames)
    assert not torch.equal(train.frames[:, 0], train.frames[:, 1])  # frames differ over time
    # A pixel fires at its intensity's rate (Bernoulli): the mean rate is the mean intensity.
    static, _ = build_digits_datasets(val_size=64)
    assert train.frames.float().mean().item() == pytest.approx(
        static.tensors[0].mean().item(), abs=0.01
    )
    # Same split as data=digits: the labels line up sample by sample.
    assert torch.equal(train.targets, static.tensors[1])


def test_plan_sets_spikingjellys_input_layout_from_the_data() -> None:
    sequence = plan_for(["data=digits_sequence", "data.time_steps=3", "model.time_steps=3"])
    assert sequence.training_config.input_layout == "NTCHW"
    assert sequence.training_config.dataset_kwargs["time_steps"] == 3
    assert plan_for([]).training_config.input_layout == "NCHW"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["data.time_steps=3"], "model.time_steps"),  # model stays at 4
        (["model=spiking_resnet18", "model.time_steps=2"], "model.time_steps"),
        (["data.time_steps=0", "model.time_steps=1"], "data.time_steps"),
        (["+data.frames=3"], "data.frames"),
    ],
)
def test_time_steps_must_match_the_data(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        plan_for(["data=digits_sequence", *overrides])
    assert caught.value.key == key


@pytest.mark.slow
@pytest.mark.smoke
def test_the_model_receives_the_loaders_frames_time_first(tmp_path: Path) -> None:
    """A real CLI run of a zoo model on data=digits_sequence with T=3: a forward pre-hook on
    the built model records what the engine feeds it. Each sample of the first training batch
    must be one dataset sample's frames, in order, along dim 0 ([T, N, C, H, W]): not a
    static image repeated T times, not batch-first. The same run is the zoo sew_resnet
    family's tiny real run (test_zoo.py), with a non-default neuron, surrogate and connection."""
    run_dir, record = tmp_path / "run", tmp_path / "first_input.pt"
    result = run_cli(
        [
            "model=zoo_sew_resnet18",
            "model._target_=tests.layout_probe.RecordingZooConfig",
            f"+model.record_file={record}",
            f"model.neuron._target_={SJ}neuron.ParametricLIFNode",
            "~model.neuron.tau",
            f"model.surrogate._target_={SJ}surrogate.Sigmoid",
            "model.connection=IAND",
            "data=digits_sequence",
            "data.time_steps=3",
            "model.time_steps=3",
            "data.val_size=16",
            "trainer.max_steps=2",
            "trainer.epochs=1",
            "trainer.batch_size=8",
            "logger=none",
            "seed=11",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        timeout=300,
        env={"PYTHONPATH": on_python_path(str(REPO))},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert math.isfinite(summary["metrics"]["train_loss"])

    shapes = Path(f"{record}.shapes").read_text().splitlines()
    assert shapes[:2] == ["train [3, 8, 3, 16, 16]"] * 2
    # 16 validation samples in batches of 8; the spike measurement's slice (all 16) in one
    assert set(shapes[2:]) == {"eval [3, 8, 3, 16, 16]", "eval [3, 16, 3, 16, 16]"}

    seen = torch.load(record)
    # The frames the run's seed gives (data.encoding_seed is ${seed}).
    train, _ = build_digits_sequence_datasets(time_steps=3, val_size=16, encoding_seed=11)
    samples = torch.stack([train[index][0] for index in range(len(train))])  # [M, T, C, H, W]
    for n in range(seen.shape[1]):
        matches = (samples == seen[:, n].unsqueeze(0)).flatten(1).all(1)
        assert matches.any(), f"sample {n} of the batch is no dataset sample in frame order"
    assert not torch.equal(seen[0], seen[1])  # distinct frames over time, not one repeated

    # ParametricLIFNode's learnable time constant is in the trained model: the neuron chosen in
    # the config is the one SpikingJelly's sew_resnet18 factory built.
    from experiments.snn.engines.spikingjelly_checkpoints import read_shard

    (shard,) = (run_dir / "checkpoints" / "step_00000002").glob("pp_*_tp_*")
    state = read_shard(shard)["model"]
    assert any(name.endswith("sn1.w") for name in state), sorted(state)[:20]
