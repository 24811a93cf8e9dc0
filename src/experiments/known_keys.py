"""Keys our config groups define: a key added with `+group.key=...` that no option of ours
defines would be accepted and silently ignored, so it is refused with the nearest valid key.

The open extension points stay open: `data.*` is checked against the data builder's signature
(data/__init__.py), `optimizer.*` against the optimizer class, `model.*` against the model's
config dataclass, and `model.cfg_options.*` by MMGen's own config merge.
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.errors import ConfigError

# Groups whose keys are fixed by their option's yaml file (the others' by their schemas).
CLOSED_GROUPS = ("trainer",)
# Top-level keys that are not config groups (conf/train.yaml) plus the groups themselves.
GROUPS = ("model", "data", "topology", "launcher", "optimizer", "trainer", "logger")


def option_file(group: str, option: str) -> Path:
    """`conf/<group>/<option>.yaml` as the package installs it (it may not exist)."""
    return Path(str(resources.files("experiments.conf"))) / group / f"{option}.yaml"


@cache
def option_keys(group: str, option: str) -> frozenset[str] | None:
    """The keys the option's yaml defines under the group (None: no such file of ours)."""
    path = option_file(group, option)
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    node = OmegaConf.create(text)
    if "@package _global_" in text.split("\n", 1)[0]:
        node = node.get(group) or {}
    return frozenset(str(key) for key in node if key != "defaults")


@cache
def top_level_keys() -> frozenset[str]:
    text = (resources.files("experiments.conf") / "train.yaml").read_text(encoding="utf-8")
    node = OmegaConf.create(text)
    return frozenset(str(key) for key in node if key != "defaults") | frozenset(GROUPS)


def check_known_keys(values: dict[str, Any], choices: dict[str, str]) -> None:
    for group in CLOSED_GROUPS:
        option = str(choices.get(group))
        known = option_keys(group, option)
        if known is not None and isinstance(values.get(group), dict):
            refuse_unknown(f"{group}.", values[group], known, f"{group}={option}")


def refuse_unknown(prefix: str, node: dict[str, Any], known: frozenset[str], where: str) -> None:
    for key in sorted(set(node) - known):
        hint = nearest(key, sorted(known), prefix, "valid keys: ")
        raise ConfigError(f"{prefix}{key}", node[key], f"not a key of {where}; {hint}")


def nearest(key: str, names: list[str], prefix: str, listing: str) -> str:
    """'did you mean <prefix><closest>?', or `listing` followed by every valid name."""
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"did you mean {prefix}{close[0]}?"
    return listing + ", ".join(f"{prefix}{name}" for name in names)


def where(path: str, choices: dict[str, Any]) -> str:
    """A node in words: `trainer=default` for a group's node, `logger=csv` for a logger's
    settings, else its dotted path (`trainer.spikes`)."""
    parts = path.split(".")
    if len(parts) == 1 and parts[0] in GROUPS:
        option = choices.get(parts[0])
        return f"{parts[0]}={option}" if isinstance(option, str) else parts[0]
    if len(parts) == 2 and parts[0] == "logger":
        return f"logger={parts[1]}"
    return path
