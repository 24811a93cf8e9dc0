"""The papers' architectures as model options, taking what the data gives (issue 58).

Spikformer's (ZK-Zhou/spikformer @ 6212689) and SEW-ResNet's (fangwei123456/
Spike-Element-Wise-ResNet @ cfc547c) models by name: their parameter counts against the
official code's, 2- and 3-channel input, a forward of event frames, the official code's
differences that our configs fix, the neuron key reaching every neuron, refusals in one line,
pipeline stages of 2-channel models, and a 2-rank channel-TP run of a 2-channel SEW-ResNet."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from spikingjelly.activation_based import functional, neuron, surrogate
from spikingjelly.activation_based.distributed.vision import TrainingConfig
from spikingjelly.activation_based.distributed.vision.execution import _forward_classification

from experiments.snn.model_input import frame_size
from experiments.snn.models import (
    build_single_process_model,
    capabilities,
    instantiate_model_config,
    parameter_count,
)
from experiments.snn.models.sew_dvs import SEWBlock
from experiments.snn.models.spikformer import NeuronThenPool

from .conftest import NO_SPIKES, compose_run, plan_for, run_cli, run_cli_in_process

IMAGENET = ["data=synthetic", "data.num_classes=1000", "data.image_size=224"]
CIFAR10 = ["data=synthetic", "data.num_classes=10", "data.image_size=32"]
DVS = ["data=synthetic", "data.channels=2", "data.image_size=128"]

# option -> (data it is the paper's model for, the official code's parameter count, the paper's
# figure in M). The official counts are the official model classes built with their papers'
# arguments (neurons have no parameters; SEW's PLIF has one each), less what their forward never
# uses: Spikformer's LayerNorms (and CIFAR10-DVS's pos_embed). Spikformer paper Tables 1-4 give
# 9.32, 16.81, 29.68, 66.34 and 2.57 M; SEW-ResNet's ImageNet nets are torchvision's ResNets
# with spiking neurons (torchvision's resnet18..152 counts; Spikformer's Table 2 quotes them).
OFFICIAL = {
    "spikformer_4_384": (CIFAR10, 9_324_730, 9.32),  # SPK:cifar10/model.py
    "spikformer_8_384": (IMAGENET, 16_816_024, 16.81),  # SPK:imagenet/model.py, embed_dims 384
    "spikformer_8_512": (IMAGENET, 29_689_384, 29.68),  # SPK:imagenet/model.py as it is
    "spikformer_8_768": (IMAGENET, 66_338_632, 66.34),  # SPK:imagenet/model.py, embed_dims 768
    "spikformer_2_256": ([*DVS, "data.num_classes=10"], 2_566_666, 2.57),  # SPK:cifar10dvs
    "sew_resnet18": (IMAGENET, 11_689_512, 11.69),
    "sew_resnet34": (IMAGENET, 21_797_672, 21.79),
    "sew_resnet50": (IMAGENET, 25_557_032, 25.56),
    "sew_resnet101": (IMAGENET, 44_549_160, 44.55),
    "sew_resnet152": (IMAGENET, 60_192_808, 60.19),
    "sew_dvs128_gesture": ([*DVS, "data.num_classes=11"], 130_426, 0.13),  # SEW:dvsgesture
    "sew_cifar10_dvs": ([*DVS, "data.num_classes=10"], 1_192_218, 1.19),  # SEW:cifar10dvs
}


def model_config(model: str, overrides: list[str]):
    return _model_config(model, tuple(overrides))


@functools.cache
def _model_config(model: str, overrides: tuple[str, ...]):
    """Composed once a module (a frozen dataclass: builders make new modules from it)."""
    return instantiate_model_config(compose_run([f"model={model}", *overrides]).model)


def dead_biases(config) -> int:
    """Spikformer's official layers have biases where SpikingJelly's have none; each is
    followed by BatchNorm, which removes a per-channel constant: those biases get no gradient
    and stay 0. CIFAR: q, k, v, proj and MLP are biased Linear layers; ImageNet and
    CIFAR10-DVS: the proj and MLP convolutions (q, k, v without bias)."""
    if not hasattr(config, "embed_dims"):
        return 0
    dims = config.embed_dims
    qkv = 3 * dims if config.patch_size == 4 else 0
    return config.depths * (qkv + dims + int(dims * config.mlp_ratio) + dims)


@pytest.mark.parametrize("model", sorted(OFFICIAL))
def test_named_models_count_the_official_codes_parameters(model: str) -> None:
    overrides, official, paper = OFFICIAL[model]
    config = model_config(model, overrides)
    assert parameter_count(config) == official - dead_biases(config)
    assert official / 1e6 == pytest.approx(paper, abs=0.01)  # the paper rounds either way


# One option a builder class (our SEWResNetConfig, SpikformerDimsConfig, SEWDVSConfig, the zoo's
# ResNet and VGG factories) and SpikingJelly's own SpikformerConfig.
MODELS_AND_INPUT = {
    "sew_resnet18": ["data.image_size=32"],
    "spikformer": ["data.image_size=32"],
    "spikformer_2_256": ["data.image_size=32"],
    "sew_dvs128_gesture": ["data.image_size=128"],
    "zoo_sew_resnet18": ["data.image_size=32"],
    "spiking_vgg11_bn": ["data.image_size=32"],
}


@pytest.mark.parametrize("channels", [2, 3])
@pytest.mark.parametrize("model", sorted(MODELS_AND_INPUT))
def test_models_take_the_datas_channels(model: str, channels: int) -> None:
    config = model_config(
        model, ["data=synthetic", f"data.channels={channels}", *MODELS_AND_INPUT[model]]
    )
    assert config.in_channels == channels
    with torch.device("meta"):
        built = config.get_builder_cls()(config)._build_canonical_model()
    stem = next(module for module in built.modules() if isinstance(module, nn.Conv2d))
    assert stem.in_channels == channels


def test_the_builders_own_three_channel_configs_keep_three() -> None:
    """SpikingJelly's SEWResNet34Config and SpikformerCIFAR10Config take 3 channels; their
    capabilities say so, and what takes any count instead."""
    for model, extra, instead in (
        ("sew_resnet34", [], "model=sew_resnet18 model.depth=34"),
        ("spikformer_cifar10", ["data.image_size=32"], "model=spikformer_4_384"),
    ):
        caps = capabilities(model_config(model, extra))
        assert caps.channels == 3 and instead in caps.channels_reason


def _batch_first_frames(config, batch: int) -> torch.Tensor:
    height, width = config.image_height, config.image_width
    return (torch.rand(batch, config.time_steps, config.in_channels, height, width) > 0.7).float()


@pytest.mark.parametrize(
    ("model", "overrides"),
    [
        ("spikformer_2_256", ["data.image_size=32", "model.time_steps=2"]),
        ("sew_dvs128_gesture", ["data.image_size=128", "model.time_steps=2"]),
    ],
    ids=["spikformer_2_256", "sew_dvs128_gesture"],
)
def test_event_models_train_on_a_frame_batch(model: str, overrides: list[str]) -> None:
    """[N, T, 2, H, W] frames through SpikingJelly's own forward (input_layout NTCHW, as its
    loop calls it): logits [N, classes] and a gradient in every parameter."""
    config = model_config(model, [*DVS, *overrides])
    built = build_single_process_model(config, torch.device("cpu"), micro_batch_size=1)
    frames = _batch_first_frames(config, 1)
    logits = _forward_classification(built, frames, config.time_steps, "m", "NTCHW")
    assert logits.shape == (1, config.num_classes)
    logits.sum().backward()
    assert all(p.grad is not None for p in built.parameters())
    functional.reset_net(built)


def test_sew_dvs_blocks_connect_as_the_official_code() -> None:
    """SEW:dvsgesture/smodels.py:34-43: ADD out + x, AND out * x, IAND x * (1 - out)."""
    gesture = model_config("sew_dvs128_gesture", ["data.image_size=128"])
    x = (torch.rand(2, 1, 32, 8, 8) > 0.5).float()
    for connection in ("ADD", "AND", "IAND"):
        config = dataclasses.replace(gesture, connection=connection)
        built = config.get_builder_cls()(config)._build_canonical_model()
        block = next(module for module in built.modules() if isinstance(module, SEWBlock))
        with torch.no_grad():
            out = block.conv(x)
            functional.reset_net(block)
            expected = {"ADD": out + x, "AND": out * x, "IAND": x * (1.0 - out)}[connection]
            assert torch.equal(block(x), expected), connection


def test_spikformer_has_the_official_codes_stem_scale_and_attention_threshold() -> None:
    """What SpikingJelly's Spikformer does differently from the official code, fixed by our
    config: the stem max-pools spikes, CIFAR10-DVS's attention scale is 0.25, the attention
    LIF fires at 0.5 with a configured neuron too."""
    config = model_config("spikformer_2_256", [*DVS, "model/neuron=lif"])
    built = config.get_builder_cls()(config)._build_canonical_model()
    assert all(block.attn.scale == 0.25 for block in built.blocks)
    assert all(block.attn.attn_lif.v_threshold == 0.5 for block in built.blocks)
    assert all(block.attn.qkv_lif.v_threshold == 1.0 for block in built.blocks)
    stages = list(built.patch_embed.stages)
    assert all(isinstance(stage, NeuronThenPool) for stage in stages)  # patch 16: 4 pools
    stage = stages[0]
    x = torch.rand(2, 1, 2, 8, 8) * 4
    expected = stage.pool(stage.neuron(stage.conv_bn(x)))
    functional.reset_net(stage)
    assert torch.equal(stage(x), expected)
    assert set(stage(x).unique().tolist()) <= {0.0, 1.0}  # the pool takes spikes
    cifar = model_config("spikformer_4_384", CIFAR10)
    with torch.device("meta"):
        cifar_stages = cifar.get_builder_cls()(cifar)._build_canonical_model().patch_embed.stages
    assert [isinstance(s, NeuronThenPool) for s in cifar_stages] == [False, False, True, True]


NEURONS = {
    "if": (neuron.IFNode, {"v_threshold": 1.0}),
    "lif": (neuron.LIFNode, {"tau": 2.0}),
    "plif": (neuron.ParametricLIFNode, {}),
}
SURROGATES = {"atan": (surrogate.ATan, 2.0), "sigmoid": (surrogate.Sigmoid, 4.0)}


@pytest.mark.parametrize(
    ("model", "kind", "gradient", "detach_reset", "overrides"),
    [
        ("sew_resnet18", "if", "atan", True, []),  # SEW-ResNet's ImageNet neuron
        ("sew_resnet34", "plif", "sigmoid", False, []),  # SpikingJelly's own config
        ("spikformer_4_384", "plif", "atan", True, CIFAR10),
        ("sew_dvs128_gesture", "lif", "sigmoid", False, ["data.image_size=128"]),
        ("zoo_sew_resnet18", "if", "sigmoid", True, []),
    ],
    ids=[
        "sew_resnet18",
        "sew_resnet34",
        "spikformer_4_384",
        "sew_dvs128_gesture",
        "zoo_sew_resnet18",
    ],
)
def test_the_neuron_key_reaches_every_neuron(
    model: str, kind: str, gradient: str, detach_reset: bool, overrides: list[str]
) -> None:
    """The class, its arguments, the surrogate and model.detach_reset (true: not the classes'
    default) in every neuron of the built model."""
    config = model_config(
        model,
        [
            *overrides,
            f"model/neuron={kind}",
            f"model/surrogate={gradient}",
            f"model.detach_reset={str(detach_reset).lower()}",
        ],
    )
    with torch.device("meta"):
        built = config.get_builder_cls()(config)._build_canonical_model()
    neurons = {n: m for n, m in built.named_modules() if isinstance(m, neuron.BaseNode)}
    cls, arguments = NEURONS[kind]
    surrogate_cls, alpha = SURROGATES[gradient]
    assert neurons and all(type(m) is cls for m in neurons.values())
    assert all(type(m.surrogate_function) is surrogate_cls for m in neurons.values())
    assert all(m.surrogate_function.alpha == alpha for m in neurons.values())
    assert all(m.detach_reset is detach_reset for m in neurons.values())
    for argument, value in arguments.items():
        assert all(
            getattr(m, argument) == value
            for name, m in neurons.items()
            if not name.endswith("attn_lif")  # Spikformer's attention fires at 0.5
        )
    # SpikingJelly's own serialisation (a checkpoint's config.json) round-trips it.
    plan = plan_for([f"model={model}", *overrides, f"model/neuron={kind}"])
    assert TrainingConfig.from_dict(plan.training_config.as_dict()) == plan.training_config


class OwnLIFNode(neuron.LIFNode):
    """A neuron class of the user's own, outside SpikingJelly's package."""


def test_a_users_own_neuron_class_reaches_our_builders_by_its_path() -> None:
    """Our builders import the class by its path in every rank; SpikingJelly's own configs
    resolve only its classes (or a registry each rank must fill), so they refuse it."""
    own = [f"model.neuron._target_={OwnLIFNode.__module__}.OwnLIFNode", "model/neuron=lif"]
    config = model_config("spikformer_4_384", [*CIFAR10, *own])
    with torch.device("meta"):
        built = config.get_builder_cls()(config)._build_canonical_model()
    assert all(type(m) is OwnLIFNode for m in built.modules() if isinstance(m, neuron.BaseNode))


def test_without_a_neuron_the_builders_keep_their_own() -> None:
    """Defaults as before: SpikingJelly's builders make their own LIF (no NeuronConfig);
    the SEW DVS networks the paper's PLIF with ATan; arguments of the node reach the neuron."""
    assert model_config("sew_resnet18", []).neuron_config is None
    assert model_config("spikformer_8_512", IMAGENET).neuron_config is None
    gesture = model_config("sew_dvs128_gesture", ["data.image_size=128"]).neuron_config
    assert gesture.class_path.endswith("ParametricLIFNode")
    assert gesture.kwargs == {"init_tau": 2.0, "detach_reset": True}
    assert gesture.surrogate.endswith("ATan") and gesture.surrogate_kwargs == {"alpha": 2.0}
    tuned = model_config("sew_resnet18", ["model/neuron=lif", "model.neuron.tau=3.0"])
    assert tuned.neuron_config.kwargs == {"tau": 3.0, "detach_reset": True}


REFUSED = {
    "sew_resnet34-two-channels": (
        ["model=sew_resnet34", "data=digits_sequence", "data.channels=2"],
        "model='sew_resnet34': takes 3-channel input (SpikingJelly's SEWResNet34Config requires "
        "in_channels=3; model=sew_resnet18 model.depth=34 is the same network",
    ),
    "in_channels-not-the-datas": (
        ["model=spikformer_4_384", "data.channels=2", "model.in_channels=3"],
        "model.in_channels=3: must equal data.channels=2 (data=digits); leave it at "
        "${data.channels}",
    ),
    "sew_dvs-small-frames": (
        ["model=sew_dvs128_gesture"],
        "data.image_size=16: sew_dvs128_gesture needs at least 128 pixels a side (its 7 2x2 "
        "max-pools), e.g. 128",
    ),
    "sew_dvs-channel-tp": (
        [
            "model=sew_cifar10_dvs",
            "data.image_size=128",
            "topology=channel_tp",
            "launcher=torchrun",
            "launcher.nproc_per_node=2",
        ],
        "topology.tensor_parallel_size=2: SEW-ResNet's 7-stage DVS network is built whole (no "
        "channel-TP shard, no pipeline split); it runs on topology=single, ddp or fsdp2",
    ),
    "spikformer_2_256-pp4": (
        [
            "model=spikformer_2_256",
            "topology=pp",
            "topology.pipeline_parallel_size=4",
            "launcher=torchrun",
            "launcher.nproc_per_node=4",
        ],
        "topology.pipeline_parallel_size=4: spikformer_2_256 splits into pipeline stages; "
        "valid sizes: 1, 2",
    ),
    "spikformer_8_768-tp8": (
        [
            "model=spikformer_8_768",
            "data.image_size=32",
            "topology=channel_tp",
            "topology.tensor_parallel_size=8",
            "launcher=torchrun",
            "launcher.nproc_per_node=8",
        ],
        "topology.tensor_parallel_size=8: spikformer_8_768 splits its 12 attention heads; "
        "valid sizes: 1, 2, 4",
    ),
    "surrogate-without-neuron": (
        ["model=sew_resnet18", "model/surrogate=atan"],
        "model.surrogate._target_='spikingjelly.activation_based.surrogate.ATan': null: without "
        "a model.neuron, SEWResNetConfig's builder makes its own neuron",
    ),
    "tau-with-a-neuron": (
        ["model=sew_resnet18", "model/neuron=if", "model.tau=3.0"],
        "model.tau=3.0: 2.0 (it is read only by the builder's own LIF, without model.neuron); "
        "with a model.neuron, set model.neuron.tau",
    ),
    "spikformer-detach_reset": (
        ["model=spikformer", "model.detach_reset=false"],
        "model.detach_reset=false: true: without a model.neuron, SpikformerConfig's builder "
        "makes its own LIF, which detaches the reset",
    ),
    "if-with-tau": (
        ["model=sew_resnet18", "model/neuron=if", "+model.neuron.tau=2.0"],
        "model.neuron.tau=2.0: IFNode takes no 'tau'",
    ),
    "own-neuron-in-spikingjellys-config": (
        [
            "model=sew_resnet34",
            "model/neuron=lif",
            "model.neuron._target_=tests.test_models.OwnLIFNode",
        ],
        "model.neuron._target_='tests.test_models.OwnLIFNode': a class of "
        "spikingjelly.activation_based.neuron: SEWResNet34Config is SpikingJelly's own config",
    ),
}


@pytest.mark.parametrize(("overrides", "says"), list(REFUSED.values()), ids=list(REFUSED))
def test_what_a_model_cannot_take_is_refused_in_one_line(
    overrides: list[str], says: str, tmp_path: Path
) -> None:
    """A dry run: refused in planning all the same, and a check that is broken plans instead
    of training."""
    run_dir = tmp_path / "run"
    result = run_cli_in_process(
        [*overrides, "dry_run=true", f"hydra.run.dir={run_dir}"], cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert says in line
    assert not run_dir.exists()


def _stages(config, size: int) -> tuple[nn.Module, list[nn.Module]]:
    builder = config.get_builder_cls()(config)
    whole = builder._build_canonical_model().eval()
    return whole, [builder._pipeline_stage(whole, rank, size) for rank in range(size)]


@pytest.mark.parametrize(
    ("model", "overrides", "size"),
    [
        ("sew_resnet18", ["data.channels=2", "data.image_size=32", "model.time_steps=2"], 2),
        ("spikformer_2_256", [*DVS, "data.image_size=32", "model.time_steps=2"], 2),
        (  # 8 blocks in 4 stages (narrowed to 64 dims: the split is the point)
            "spikformer_8_384",
            [
                *DVS,
                "data.image_size=32",
                "model.time_steps=2",
                "model.embed_dims=64",
                "model.num_heads=8",
            ],
            4,
        ),
    ],
    ids=["sew_resnet18-pp2", "spikformer_2_256-pp2", "spikformer_8_384-pp4"],
)
def test_pipeline_stages_of_a_two_channel_model_compose_to_the_model(
    model: str, overrides: list[str], size: int
) -> None:
    """The stages SpikingJelly's pipeline runs (its split, or ours for other block counts)
    take the 2-channel frames, and one after the other compute the whole model's output."""
    config = model_config(model, ["data=synthetic", *overrides])
    whole, stages = _stages(config, size)
    x = (torch.rand(config.time_steps, 2, 2, 32, 32) > 0.6).float()
    with torch.no_grad():
        expected = whole(x)
        functional.reset_net(whole)
        out = x
        for stage in stages:
            out = stage(out)
    assert torch.allclose(out, expected)
    stage_names = [set(stage.state_dict()) for stage in stages]
    assert sum(map(len, stage_names)) == len(whole.state_dict())  # disjoint, complete


def test_spikformer_stage_shapes_follow_its_width_and_token_grid() -> None:
    """The boundary shapes SpikingJelly's pipeline gives torch's PipelineStage on CUDA: its
    own builder assumes 384 dims and sides divisible by 16; ours come from the config (2-256
    on 36x40 frames: each of the stem's four max-pools halves a side, rounding up, so 3x3
    tokens of 256 dims), and stage 0's output has that shape. SpikingJelly's memopt, which
    tries the stage on such an input, runs on CPU too."""
    config = dataclasses.replace(
        model_config("spikformer_2_256", [*DVS, "model.time_steps=2"]),
        image_height=36,
        image_width=40,
    )
    builder = config.get_builder_cls()(config)
    common = dict(
        process_group=None,
        memopt_process_group=None,
        pipeline_size=2,
        pipeline_microbatches=2,
        device=torch.device("cpu"),
        micro_batch_size=4,
        memopt_level=0,
        memopt_compress_inputs=False,
        memopt_checkpoint_budget="memory",
    )
    first, _, into_first, out_of_first = builder.build(pipeline_rank=0, **common)
    # memopt's trial input on a later stage is this width's activation, too
    _, _, into_last, out_of_last = builder.build(pipeline_rank=1, **{**common, "memopt_level": 1})
    assert into_first == (2, 2, 2, 36, 40)  # micro-batch first, as stage 0 receives it
    assert out_of_first == into_last == (2, 2, 256, 3, 3)
    assert out_of_last == (2, 2, 10)
    with torch.no_grad():
        out = first(torch.rand(2, 2, 2, 36, 40))
    assert tuple(out.shape) == out_of_first


def test_non_square_frames_reach_the_models_that_take_them() -> None:
    data = {"name": "n_caltech101", "image_size": 240, "image_height": 180, "image_width": 240}
    assert frame_size(data) == (180, 240)
    assert frame_size({"image_size": 64}) == (64, 64)


@pytest.mark.slow
@pytest.mark.dist
def test_a_two_channel_sew_resnet_trains_with_channel_tp_on_two_ranks(tmp_path: Path) -> None:
    """SpikingJelly's SEW-ResNet builder, with our 2-channel stem, on 2 torchrun ranks of
    channel TP through its own loop: every rank holds the whole 2-channel stem and half of
    each BasicBlock's first convolution."""
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "model=sew_resnet18",
            "data=digits_sequence",
            "data.channels=2",
            "data.time_steps=2",
            "model.time_steps=2",
            "data.val_size=8",
            "topology=channel_tp",
            "launcher=torchrun",
            "launcher.nproc_per_node=2",
            "trainer.max_steps=2",
            "trainer.epochs=1",
            "trainer.batch_size=8",
            *NO_SPIKES,  # the spike measurement is test_spikes.py's
            "logger=none",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert math.isfinite(summary["metrics"]["train_loss"])
    from experiments.snn.engines.spikingjelly_checkpoints import read_shard

    shards = sorted((run_dir / "checkpoints" / "step_00000002").glob("pp_*_tp_*"))
    assert len(shards) == 2
    for shard in shards:
        state = read_shard(shard)["model"]
        assert tuple(state["conv1.weight"].shape) == (64, 2, 7, 7)
        assert state["layer1.0.conv1.weight"].shape[0] == 32  # 64 channels over 2 ranks
