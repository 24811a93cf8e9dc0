"""Keys our config groups define, and how a refusal names one: a key that no option of ours
defines is refused with the nearest valid key (the groups' schemas decide which keys exist:
schemas/; a misspelt override is refused while Hydra composes: composition_errors.py).

The open extension points stay open: `data.*` is checked against the data builder's signature
(data/__init__.py), `optimizer.*` against the optimizer class, `model.*` against the model's
config dataclass, and `model.cfg_options.*` by MMGen's own config merge.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

# The config groups that leave a node in the run config (conf/train.yaml's defaults).
GROUPS = ("model", "data", "topology", "launcher", "optimizer", "trainer", "logger")


def option_file(group: str, option: str) -> Path:
    """`conf/<group>/<option>.yaml` as the package installs it (it may not exist)."""
    return Path(str(resources.files("experiments.conf"))) / group / f"{option}.yaml"


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
