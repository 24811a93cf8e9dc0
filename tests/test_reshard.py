"""run/reshard.py and snn/reshard.py without a run: which engines and families refuse a
topology change, and the loop's own global-batch check when it loads (test_topologies.py
resumes real runs)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.errors import ConfigError
from experiments.run import reshard
from experiments.snn import reshard as snn_reshard

CHANGED = ["topology.data_parallel: fsdp2 -> ddp", "trainer.max_steps: 8 -> 16"]


def test_the_classic_trainer_cannot_reshard_and_is_refused_naming_why(tmp_path: Path) -> None:
    dims = SimpleNamespace(mesh_shape=(2, 1, 1))
    with pytest.raises(ConfigError) as refused:
        snn_reshard.check(tmp_path, CHANGED, "classify", dims, 8, False)
    assert refused.value.key == "topology.data_parallel"
    assert "the classic Trainer resumes only under the topology" in str(refused.value)


def test_a_gan_run_under_another_topology_is_refused_naming_why() -> None:
    with pytest.raises(ConfigError) as refused:
        reshard.refuse("MMGen's train_model", CHANGED, "another world size is not handled yet")
    assert "fsdp2 as recorded: MMGen's train_model resumes only" in str(refused.value)


def test_without_a_topology_change_nothing_is_checked(tmp_path: Path) -> None:
    snn_reshard.check(tmp_path, ["trainer.max_steps: 8 -> 16"], "spikingjelly", None, 8, False)
    assert reshard.resharded(CHANGED) == CHANGED[:1]


def test_the_data_position_is_kept_or_moved_with_the_global_batch(tmp_path: Path) -> None:
    """The loop's own check when it loads (a worker's config is already rewritten): a step-4
    checkpoint of dp=2 x 8 (64 samples into its epoch)."""
    from experiments.run.checkpoint import CheckpointError
    from experiments.snn.engines.spikingjelly_resume import Resume

    mesh = {"mesh": {"shape": [2, 1, 1]}, "global_batch": 16}

    def position(batch_size: int, dp: int, allow: bool) -> int:
        resume = Resume([], dp, allow, loaded=lambda path, step: None)
        return resume._position(tmp_path, mesh, batch_size, 4)

    assert position(16, 1, False) == 4  # global 16 kept
    assert position(4, 4, False) == 4
    assert position(8, 1, True) == 8  # 64 samples / 8
    with pytest.raises(CheckpointError, match="global batch of 16, this run at 8"):
        position(8, 1, False)


def _checkpoint(root: Path, shape: list[int], mesh: bool = True) -> None:
    step = root / "checkpoints" / "step_00000004"
    _, pp, tp = shape
    for p in range(pp):
        for t in range(tp):
            (step / f"pp_{p:04d}_tp_{t:04d}").mkdir(parents=True)
            (step / f"pp_{p:04d}_tp_{t:04d}" / ".metadata").write_bytes(b"")
    recipe = {"pipeline_parallel_size": pp, "tensor_parallel_size": tp, "batch_size": 8}
    (step / "config.json").write_text(json.dumps(recipe))
    if mesh:
        (step / "mesh.json").write_text(json.dumps({"mesh": {"shape": shape}, "global_batch": 8}))


def test_a_split_no_builder_can_merge_is_refused_naming_the_sizes(tmp_path: Path) -> None:
    _checkpoint(tmp_path, [1, 1, 2])
    dims = SimpleNamespace(mesh_shape=(1, 1, 1))
    with pytest.raises(ConfigError) as refused:
        snn_reshard.check(tmp_path, CHANGED, "spikingjelly", dims, 8, False, can_resplit=False)
    assert refused.value.key == "topology" and "pp=1 x tp=2: " in str(refused.value)
    snn_reshard.check(tmp_path, CHANGED, "spikingjelly", dims, 8, False, can_resplit=True)


def test_a_checkpoint_without_its_mesh_resumes_only_as_written(tmp_path: Path) -> None:
    """A SpikingJelly checkpoint without our mesh.json (its data-parallel size unknown): a
    topology change is refused naming the key; the same topology resumes."""
    _checkpoint(tmp_path, [2, 1, 1], mesh=False)
    dims = SimpleNamespace(mesh_shape=(1, 1, 1), describe=lambda: "dp=1 x pp=1 x tp=1")
    with pytest.raises(ConfigError) as refused:
        snn_reshard.check(tmp_path, CHANGED, "spikingjelly", dims, 8, False, can_resplit=True)
    assert refused.value.key == "topology" and "written without mesh.json" in str(refused.value)
    snn_reshard.check(tmp_path, [], "spikingjelly", dims, 8, False)


@pytest.mark.parametrize("recipe", ["[1, 2]", '{"pipeline_parallel_size": null}'])
def test_an_older_checkpoint_whose_recipe_is_not_a_recipe_is_only_torn(
    tmp_path: Path, recipe: str
) -> None:
    """A step folder whose config.json holds JSON of the wrong shape is a torn checkpoint
    (skipped, with why), not a traceback at planning: the newest complete one is chosen."""
    from experiments.snn.engines.spikingjelly_checkpoints import scan_checkpoints

    _checkpoint(tmp_path, [1, 1, 1])
    root = tmp_path / "checkpoints"
    (root / "step_00000001" / "pp_0000_tp_0000").mkdir(parents=True)
    (root / "step_00000001" / "config.json").write_text(recipe)
    complete, torn = scan_checkpoints(root)
    assert [p.name for p in complete] == ["step_00000004"]
    assert [(p.name, why.split(" (")[0]) for p, why in torn] == [
        ("step_00000001", "config.json unreadable")
    ]
    assert snn_reshard.newest_checkpoint(root)[0] == complete[0]
