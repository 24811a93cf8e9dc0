"""A nested config as flat dotted keys: {"a": {"b": 1}} -> {"a.b": 1}.

One function because three readers name a nested config's values the same way: a GAN model's
`cfg_options` become MMGen's `--cfg-options` (gan/recipes.py), the loggers get the run's
config as flat parameters (loggers/), and the resume-time check compares a launch with the
recorded run key by key (run/recorded_config.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _as_is(value: Any) -> Any:
    return value


def flatten(tree: Any, leaf: Callable[[Any], Any] = _as_is) -> dict[str, Any]:
    """Every leaf of `tree` under its dotted key, its value passed through `leaf`.

    A leaf is anything but a non-empty dict: lists stay whole, and an empty dict below the top
    is one leaf (`{"a": {}}` -> `{"a": {}}`). An empty `tree` has no keys; a `tree` that is
    not a dict is one leaf under the key "".
    """
    return _flatten(tree, leaf, "")


def _flatten(node: Any, leaf: Callable[[Any], Any], prefix: str) -> dict[str, Any]:
    if not isinstance(node, dict) or (not node and prefix):
        return {prefix[:-1]: leaf(node)}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(_flatten(value, leaf, f"{prefix}{key}."))
    return flat
