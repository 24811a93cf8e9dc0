"""The presets named after papers (conf/experiment/, issue 58): each is its paper's recipe as
the official code has it, or lists why not.

- The recipe card cannot drift: tests/data/recipe_cards.toml transcribes each paper's official
  values with the source line of each; every preset's `paper.card` (what the dry run prints as
  the paper's) equals it, and the preset's own run, read from its plan, differs from it exactly
  in the fields its `paper.deviations` lists (a difference not listed fails, naming the field;
  so does a listed deviation that is no difference).
- Every preset trains: 2 optimizer steps of SpikingJelly's loop on CPU, on the real on-disk
  formats (CIFAR's pickled batches, SpikingJelly's events_np trees, an image folder), in one
  `-m` sweep whose points fork one warm process.
"""

from __future__ import annotations

import json
import re
import tomllib
from functools import cache
from importlib import resources
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from experiments.data import events
from experiments.snn.recipe_card import flat, same

from .conftest import NO_SPIKES, REPO, plan_for, run_cli
from .support.datasets import write_events

CARDS = REPO / "tests" / "data" / "recipe_cards.toml"
# KEY:path:lines (note), lines as 12, 12-15 or 1,45; TensorBoard logs have no lines
REPOSITORY_SOURCE = re.compile(
    r"^(?P<path>[\w./-]+?)(:(?P<lines>\d+(-\d+)?(,\d+(-\d+)?)*))?( \(.+\))?$"
)


@cache
def transcription() -> dict[str, Any]:
    return tomllib.loads(CARDS.read_text(encoding="utf-8"))


def _fields(node: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """The card's {value, source} leaves as dotted fields."""
    fields: dict[str, dict[str, Any]] = {}
    for key, value in node.items():
        if key == "variants":
            continue
        if isinstance(value, dict) and set(value) == {"value", "source"}:
            fields[f"{prefix}{key}"] = value
        elif isinstance(value, dict):
            fields.update(_fields(value, f"{prefix}{key}."))
    return fields


@cache
def official_cards() -> dict[str, dict[str, dict[str, Any]]]:
    """preset -> field -> {value, source}: each card, and each variant as its card with the
    variant's fields replaced."""
    cards = {}
    for name, card in transcription().items():
        if name == "sources":
            continue
        cards[name] = _fields(card)
        for variant, fields in card.get("variants", {}).items():
            cards[variant] = {**cards[name], **_fields(fields)}
    return cards


def paper_presets() -> list[str]:
    folder = resources.files("experiments.conf") / "experiment"
    names = []
    for path in sorted(folder.iterdir(), key=attrgetter("name")):
        if path.name.endswith(".yaml") and "paper:" in path.read_text(encoding="utf-8"):
            names.append(path.name.removesuffix(".yaml"))
    return names


def test_every_paper_preset_has_a_transcribed_card() -> None:
    assert paper_presets() == sorted(official_cards())


def test_every_value_names_its_source_line_at_a_pinned_commit() -> None:
    sources = transcription()["sources"]
    commit = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")
    for card, fields in official_cards().items():
        for field, leaf in fields.items():
            key, _, where = leaf["source"].partition(":")
            assert key in sources, (
                f"{card}.{field}: {leaf['source']!r} names no source of [sources]"
            )
            if commit.match(sources[key]):
                found = REPOSITORY_SOURCE.match(where)
                assert found, f"{card}.{field}: {where!r} is not path:lines (note)"
                logs = found["path"].startswith("origin_logs/")  # TensorBoard files: no lines
                assert found["lines"] or logs, f"{card}.{field}: {where!r} names no line"
            else:
                assert where.strip(), f"{card}.{field}: {leaf['source']!r} says not where"


@pytest.mark.parametrize("preset", paper_presets())
def test_the_preset_is_its_papers_recipe_or_lists_why_not(preset: str) -> None:
    """The preset's paper node equals the transcription, field by field; its planned run (ours)
    differs from the paper's values exactly where it lists a deviation, with a reason."""
    plan = plan_for([f"experiment={preset}", "dry_run=true"])
    official = official_cards()[preset]
    paper = plan.paper
    assert paper is not None, f"{preset}: no paper node reached the plan"
    assert same(paper["top1"], official["top1"]["value"]), f"{preset}: top1"
    printed = flat(paper["card"])
    expected = {field: leaf["value"] for field, leaf in official.items() if field != "top1"}
    assert sorted(printed) == sorted(expected), f"{preset}: the paper node's fields"
    for field, value in expected.items():
        assert same(printed[field], value), (
            f"{preset}: paper.card.{field} is {printed[field]!r}; recipe_cards.toml transcribes "
            f"{value!r} ({official[field]['source']})"
        )
    ours = plan.card
    assert sorted(ours) == sorted(expected), f"{preset}: this run's card has other fields"
    listed = flat(paper["deviations"] or {})
    for field, value in expected.items():
        differs = not same(value, ours[field])
        assert differs <= (field in listed), (
            f"{preset}: {field} is {ours[field]!r}, the paper's {value!r} "
            f"({official[field]['source']}), and paper.deviations does not list it"
        )
        assert (field in listed) <= differs, (
            f"{preset}: paper.deviations lists {field}, but this run has the paper's {value!r}"
        )
    text = plan.as_text()
    assert "recipe card" in text and paper["title"] in text


def test_the_dry_run_prints_the_card_and_marks_an_unlisted_difference() -> None:
    """`experiments-train experiment=X dry_run=true` shows the paper's values beside this
    run's: a listed deviation with its reason, and a value changed on the command line as a
    difference the preset does not list."""
    plan = plan_for(["experiment=sew_dvs128_gesture", "dry_run=true", "optimizer.lr=0.002"])
    lines = plan.as_text().splitlines()
    changed = next(line for line in lines if " optimizer.lr " in line)
    assert changed.split()[:4] == ["!", "optimizer.lr", "0.001", "0.002"]
    assert "not a listed deviation" in changed
    listed = next(line for line in lines if "dataset.frames_trained" in line)
    assert listed.split()[:4] == ["~", "dataset.frames_trained", "12", "all"]
    assert "SpikingJelly's loop feeds each batch whole" in listed


def test_the_presets_overrides_are_overrides_not_copies() -> None:
    """The other depths and widths, and the second dataset of a recipe, name their base
    recipe in their defaults and set only what differs."""
    folder = REPO / "conf" / "experiment"
    for name, base in (
        ("sew_resnet18_imagenet", "sew_resnet34_imagenet"),
        ("sew_resnet152_imagenet", "sew_resnet34_imagenet"),
        ("spikformer_8_384_imagenet", "spikformer_8_512_imagenet"),
        ("spikformer_4_384_cifar100", "spikformer_4_384_cifar10"),
        ("spikformer_2_256_dvs128_gesture", "spikformer_2_256_cifar10_dvs"),
    ):
        preset = yaml.safe_load((folder / f"{name}.yaml").read_text(encoding="utf-8"))
        assert preset["defaults"][0] == base, name
        assert "trainer" not in preset or set(preset["trainer"]) <= {"epochs", "scheduler_kwargs"}


# ------------------------------------------------------------------ 2 steps of every preset

# What a CPU run of a preset changes, for every point: 2 optimizer steps of a global batch of 2
# in micro-batches of 1 (the smallest forward; mixup mixes the rank's batch of 2 before the
# accumulation splits it), no spike measurement, no logger, no DataLoader workers.
CPU_RUN = [
    "trainer.max_steps=2",
    "trainer.global_batch_size=2",
    "trainer.batch_size=1",
    "trainer.workers=0",
    *NO_SPIKES,
    "trainer.spikes.guard=null",
    "logger=none",
]
# The ImageNet presets' architectures take any multiple of their patch (Spikformer: 16) or
# stride: their tiny image folder is read at 32x32 (224 in the recipe) over its 10 classes, with
# 2 of its 40 training images held out for validation. CIFAR keeps its 32x32, event frames their
# sensor's 128x128 (the SEW networks' seven halvings need it). The presets run T=1 or 2 (4 or 16
# in the recipes; an event preset's frames follow model.time_steps): SpikingJelly's multi-step
# models and the loop take the same path for any T. CIFAR-100's test batch is cut to 10 images.
CPU_CHANGES = {
    # T=2: SEW-ResNet's last BatchNorm sees a 1x1 map at 32x32, so a micro-batch of one image
    # needs two time steps for more than one value a channel
    "imagefolder": {
        "image_size": 32,
        "num_classes": 10,
        "val_fraction": 0.05,
        "model": {"time_steps": 2},
    },
    "cifar10": {"model": {"time_steps": 1}},
    "cifar100": {"model": {"time_steps": 1}},
    "cifar10_dvs": {"model": {"time_steps": 1}},
    "dvs128_gesture": {"model": {"time_steps": 1}},
}
CIFAR100_TEST_IMAGES = 10  # of the 100 (one a class) its root is written with
# The lr the loop trains the first epoch at, as each paper's schedule gives it (its warm-up start,
# or its base lr): read back from the run, after SpikingJelly's loop stepped EpochSchedule.
FIRST_EPOCH_LR = {
    "spikformer_4_384_cifar10": 1e-5,
    "spikformer_4_384_cifar100": 1e-5,
    "spikformer_8_384_imagenet": 1e-6,
    "spikformer_8_512_imagenet": 1e-6,
    "spikformer_8_768_imagenet": 1e-6,
    "spikformer_2_256_cifar10_dvs": 1e-5,
    "spikformer_2_256_dvs128_gesture": 1e-5,
    "sew_resnet18_imagenet": 0.1,
    "sew_resnet34_imagenet": 0.1,
    "sew_resnet50_imagenet": 0.1,
    "sew_resnet101_imagenet": 0.1,
    "sew_resnet152_imagenet": 0.1,
    "sew_dvs128_gesture": 1e-3,
    "sew_cifar10_dvs": 0.01,
}


def _cpu_preset(folder: Path, preset: str, root: Path, changes: dict[str, Any]) -> str:
    """experiment/cpu_<preset>.yaml in a --config-dir: the preset on this root, with these
    changes (`data` keys at the top level, other groups as nodes)."""
    name = f"cpu_{preset}"
    groups = {key: value for key, value in changes.items() if isinstance(value, dict)}
    data = {key: value for key, value in changes.items() if key not in groups}
    node = {"defaults": [preset], "data": {"root": str(root), **data}, **groups}
    text = "# @package _global_\n" + yaml.safe_dump(node, sort_keys=False)
    (folder / "experiment" / f"{name}.yaml").write_text(text, encoding="utf-8")
    return name


def _cifar100_of_ten_test_images(root: Path) -> Path:
    """torchvision's CIFAR-100 files (tests/support/datasets.py), one image a class, whose test
    batch keeps its first CIFAR100_TEST_IMAGES (the validation a run makes is the whole batch)."""
    import pickle

    from .support.datasets import CIFAR_FOLDERS, write_cifar

    write_cifar(root, "cifar100", train_per_class=1, test_per_class=1)
    test = root / CIFAR_FOLDERS["cifar100"] / "test"
    batch = pickle.loads(test.read_bytes())
    for key in ("filenames", "fine_labels", "coarse_labels", "data"):
        batch[key] = batch[key][:CIFAR100_TEST_IMAGES]
    test.write_bytes(pickle.dumps(batch, protocol=2))
    return root


@pytest.fixture(scope="module")
def trained(dataset_files, imagefolder_session: Path, module_tmp) -> dict[str, Any]:
    """Every paper preset, 2 steps on CPU, as one `experiments-train -m` sweep (the local
    launcher's warm points: one process's imports shared by every point)."""
    import time

    work = module_tmp("recipes")
    (work / "conf" / "experiment").mkdir(parents=True)
    roots = {
        "imagefolder": imagefolder_session,
        "cifar10": dataset_files.cifar("cifar10"),
        "cifar100": _cifar100_of_ten_test_images(work / "cifar100"),
        "cifar10_dvs": dataset_files.events("cifar10_dvs"),
        # one sample a class in test/: 11 validation samples (the shared root has 22)
        "dvs128_gesture": write_events(work / "dvs128", "dvs128_gesture", test_per_class=1),
    }
    names = []
    for preset in paper_presets():
        option = official_cards()[preset]["dataset.name"]["value"]
        names.append(_cpu_preset(work / "conf", preset, roots[option], CPU_CHANGES[option]))
    started = time.perf_counter()
    result = run_cli(
        [
            "-m",
            f"--config-dir={work / 'conf'}",
            "experiment=" + ",".join(names),
            *CPU_RUN,
            f"hydra.sweep.dir={work / 'sweep'}",
        ],
        cwd=work,
        env=dataset_files.cifar_env(),
        timeout=480,
    )
    seconds = time.perf_counter() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    points = {}
    for summary_path in sorted((work / "sweep").glob("*/summary.json")):
        summary = json.loads(summary_path.read_text())
        preset = next(o for o in summary["overrides"] if o.startswith("experiment="))
        points[preset.removeprefix("experiment=cpu_")] = summary_path.parent
    return {"points": points, "seconds": seconds, "roots": roots}


@pytest.mark.slow
def test_every_preset_trains_two_steps_of_spikingjellys_loop_on_cpu(trained, figures) -> None:
    """Each point completed 2 optimizer steps through SpikingJelly's train_classification on
    its dataset's real on-disk format (CIFAR's pickled batches through torchvision with the
    recipe's augmentation; event frames [N, T, 2, H, W] from SpikingJelly's own cache, which
    the run built), validated on it, and trained the first epoch at the lr its paper's
    schedule gives it (EpochSchedule stepped by the loop)."""
    assert sorted(trained["points"]) == paper_presets()
    walls = {}
    for preset, point in trained["points"].items():
        summary = json.loads((point / "summary.json").read_text())
        walls[preset] = summary.get("wall_time_s")
        assert summary["status"] == "completed", (preset, summary.get("error"))
        assert summary["metrics"]["val_loss"] > 0, preset
        steps = [
            json.loads(line)["step"] for line in (point / "steps.jsonl").read_text().splitlines()
        ]
        assert steps[-1] == 2, preset
        epoch = json.loads((point / "metrics.jsonl").read_text().splitlines()[-1])
        assert same(epoch["lr"], FIRST_EPOCH_LR[preset]), (preset, epoch["lr"])
        config = OmegaConf.load(point / ".hydra" / "config.yaml")
        data = OmegaConf.to_container(config.data, resolve=True)
        if "split_by" in data:  # an event dataset: its frames cached where SpikingJelly keeps them
            root = trained["roots"][data["name"]]
            assert events.is_built(root, data["frames_number"], data["split_by"]), preset
    figures(sweep_seconds=round(trained["seconds"], 1), point_seconds=walls)
