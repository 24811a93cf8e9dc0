"""The presets named after papers (conf/experiment/, issue 58): each is its paper's recipe as
the official code has it, or lists why not.

- The recipe card cannot drift: tests/data/recipe_cards.toml transcribes each paper's official
  values with the source line of each; every preset's `paper.card` (what the dry run prints as
  the paper's) equals it, and the preset's own run, read from its plan, differs from it exactly
  in the fields its `paper.deviations` lists (a difference not listed fails, naming the field;
  so does a listed deviation that is no difference).
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from importlib import resources
from operator import attrgetter
from typing import Any

import pytest
import yaml

from experiments.snn.recipe_card import flat, same

from .conftest import REPO, plan_for

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
    listed = paper["deviations"] or {}
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
