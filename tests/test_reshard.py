"""run/reshard.py and snn/reshard.py without a run: which engines and families refuse a
topology change, and the engine's own global-batch check (test_topologies.py resumes real
runs)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.errors import ConfigError
from experiments.run import reshard
from experiments.snn import reshard as snn_reshard

CHANGED = ["topology.data_parallel: fsdp2 -> ddp", "trainer.max_steps: 8 -> 16"]


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ("spikingjelly", "SpikingJelly's train_classification resumes only under the topology"),
        ("classify", "the classic Trainer resumes only under the topology"),
    ],
)
def test_engines_that_cannot_reshard_are_refused_naming_why(
    engine: str, said: str, tmp_path: Path
) -> None:
    dims = SimpleNamespace(mesh_shape=(2, 1, 1))
    with pytest.raises(ConfigError) as refused:
        snn_reshard.check(tmp_path, CHANGED, engine, dims, 8, False)
    assert refused.value.key == "topology.data_parallel" and said in str(refused.value)


def test_a_gan_run_under_another_topology_is_refused_naming_why() -> None:
    with pytest.raises(ConfigError) as refused:
        reshard.refuse("MMGen's train_model", CHANGED, "another world size is not handled yet")
    assert "fsdp2 as recorded: MMGen's train_model resumes only" in str(refused.value)


def test_without_a_topology_change_nothing_is_checked(tmp_path: Path) -> None:
    snn_reshard.check(tmp_path, ["trainer.max_steps: 8 -> 16"], "spikingjelly", None, 8, False)
    assert reshard.resharded(CHANGED) == CHANGED[:1]


def _engine(batch_size: int, dp: int, allow: bool) -> SimpleNamespace:
    return SimpleNamespace(
        config=SimpleNamespace(batch_size=batch_size),
        plan=SimpleNamespace(
            dims=SimpleNamespace(data_parallel_size=dp),
            trainer={"allow_global_batch_change": allow},
        ),
    )


def test_the_data_position_is_kept_or_moved_with_the_global_batch(tmp_path: Path) -> None:
    """The CPU engine's own check when it loads (a worker's config is already rewritten): a
    step-4 checkpoint of dp=2 x 8 (64 samples into its epoch)."""
    from experiments.run.checkpoint import CheckpointError
    from experiments.snn.engines.cpu import _Trainer

    meta = {"mesh": {"shape": [2, 1, 1]}, "recipe": {"batch_size": 8}, "batch_in_epoch": 4}
    position = _Trainer._resharded_position
    assert position(_engine(16, 1, False), tmp_path, meta) == 4  # global 16 kept
    assert position(_engine(4, 4, False), tmp_path, meta) == 4
    assert position(_engine(8, 1, True), tmp_path, meta) == 8  # 64 samples / 8
    with pytest.raises(CheckpointError, match="global batch of 16, this run at 8"):
        position(_engine(8, 1, False), tmp_path, meta)


def test_a_split_no_builder_can_merge_is_refused_naming_the_sizes(tmp_path: Path) -> None:
    import json

    step = tmp_path / "checkpoints" / "step_00000004"
    step.mkdir(parents=True)
    (step / "meta.json").write_text(
        json.dumps({"mesh": {"shape": [1, 1, 2]}, "recipe": {"batch_size": 8}, "step": 4})
    )
    dims = SimpleNamespace(mesh_shape=(1, 1, 1))
    with pytest.raises(ConfigError) as refused:
        snn_reshard.check(tmp_path, CHANGED, "cpu", dims, 8, False, can_resplit=False)
    assert refused.value.key == "topology" and "pp=1 x tp=2: " in str(refused.value)
    snn_reshard.check(tmp_path, CHANGED, "cpu", dims, 8, False, can_resplit=True)  # re-split
