"""What a run's spikes.json is called and holds, and how it is read back: shared by the
measurement (spikes.py, which needs torch) and the figure (spikes_figure.py, drawn in a child
process that must start without importing torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPIKES_FILE = "spikes.json"
FIGURE = "spikes.png"
SATURATED = 0.99  # a layer firing at >= this rate is saturated (the health guard)


def read(run_dir: Path) -> list[dict[str, Any]]:
    """The run's evaluations so far; none for a missing or unreadable file."""
    try:
        return list(json.loads((run_dir / SPIKES_FILE).read_text())["evaluations"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
