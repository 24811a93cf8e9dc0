"""A model exported from a run (experiments-export): one topology-free file, a plain state
dict that `torch.load(weights_only=True)` reads, and a JSON sidecar beside it (`<file>.json`)
that says what it is: the model config, the run and checkpoint it came from, the step and the
run's metrics. Shared by the families' exporters and by experiments-eval / -sample, which
accept such a file in place of a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.run.record import read_json, versions, write_json_atomic, write_torch_atomic

FORMAT_KEY = "experiments_export"  # the sidecar's mark (its value: the format's version)
FORMAT = 1
FOLDER = "export"  # <run>/export/ when no out=FILE is given


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def read_sidecar(path: Path) -> dict[str, Any]:
    return json.loads(sidecar_of(path).read_text(encoding="utf-8"))


def is_exported(path: Path) -> bool:
    """A file experiments-export wrote: its sidecar is there and carries our mark."""
    sidecar = read_json(sidecar_of(Path(path))) if Path(path).is_file() else None
    return (sidecar or {}).get(FORMAT_KEY) == FORMAT


def default_path(run_dir: Path, name: str, step: int) -> Path:
    return Path(run_dir) / FOLDER / f"{name}-step{step}.pt"


def write(path: Path, state: dict[str, Any], sidecar: dict[str, Any]) -> Path:
    """The state dict, then its sidecar, each written atomically (a reader never sees half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_torch_atomic(state, path)
    write_json_atomic(sidecar_of(path), {FORMAT_KEY: FORMAT, **sidecar, "versions": versions()})
    return path
