"""What an SNN model takes against what its data gives: channels and frame size, before launch.

Data options declare `channels` (3 for images, 2 for event frames) and `image_size`, the side of
square input; one whose frames are not square (N-Caltech101: 180x240) also sets `image_height`
and `image_width`. A model's yaml follows them (`in_channels: ${data.channels}`, ...), and its
capabilities (snn/models/__init__.py) say what its builder cannot take: SpikingJelly's own
3-channel configs, SEW-ResNet's one `image_size`, the max-pools of the SEW DVS networks.
"""

from __future__ import annotations

from typing import Any

from experiments.errors import ConfigError
from experiments.topology import Capabilities


def frame_size(data: dict[str, Any]) -> tuple[int, int]:
    """(height, width) of the data's samples."""
    side = data["image_size"]
    height, width = data.get("image_height"), data.get("image_width")
    return (side if height is None else height, side if width is None else width)


def check(config: Any, data: dict[str, Any], caps: Capabilities, name: str) -> None:
    _check_channels(config, data, caps, name)
    _check_frame_size(config, data, caps, name)


def _check_channels(config: Any, data: dict[str, Any], caps: Capabilities, name: str) -> None:
    given = data.get("channels", 3)
    if caps.channels is not None and given != caps.channels:
        raise ConfigError(
            "model",
            name,
            f"takes {caps.channels}-channel input ({caps.channels_reason}); "
            f"data={data['name']} gives {given} channels",
        )
    takes = getattr(config, "in_channels", caps.channels or 3)
    if takes != given:
        raise ConfigError(
            "model.in_channels",
            takes,
            f"must equal data.channels={given} (data={data['name']}); leave it at "
            "${data.channels}",
        )


def _check_frame_size(config: Any, data: dict[str, Any], caps: Capabilities, name: str) -> None:
    height, width = frame_size(data)
    square = height == width
    if square:
        sides = {"data.image_size": height}
    else:
        sides = {"data.image_height": height, "data.image_width": width}
    if caps.square_only and not square:
        raise ConfigError(
            "model",
            name,
            "takes square frames (one model.image_size, from which SpikingJelly's builder "
            f"sizes its pipeline stages); data={data['name']} gives {height}x{width}",
        )
    fixed = caps.fixed_image_size
    if fixed is not None and (height, width) != (fixed, fixed):
        raise ConfigError(
            "data.image_size",
            data["image_size"],
            f"{name} takes {fixed}x{fixed} input; use data.image_size={fixed}",
        )
    for key, side in sides.items():
        if side % caps.image_multiple:
            raise ConfigError(
                key,
                side,
                f"{name} needs a multiple of "
                f"{caps.image_multiple} ({caps.image_reason}), e.g. "
                f"{max(1, -(-side // caps.image_multiple)) * caps.image_multiple}",
            )
        if side < caps.min_image_side:
            raise ConfigError(
                key,
                side,
                f"{name} needs at least {caps.min_image_side} pixels a side "
                f"({caps.image_reason}), e.g. {caps.min_image_side}",
            )
    expected = {"image_height": height, "image_width": width}
    if square:
        expected["image_size"] = height
    for key, value in expected.items():
        if hasattr(config, key) and getattr(config, key) != value:
            source = "data.image_size" if square else f"data.{key}"
            raise ConfigError(f"model.{key}", getattr(config, key), f"must equal {source}={value}")
