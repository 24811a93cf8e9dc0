"""Read a W&B offline run file (`run-<id>.wandb`) with W&B's own protobuf records.

wandb >= 0.20 no longer ships a Python reader for its transaction log (its Go core writes and
`wandb sync` reads it). The container is LevelDB's log format behind a 7-byte W&B header:
32 KiB blocks of records, each a 7-byte header (CRC, length, type: full/first/middle/last)
and a piece of one serialized `wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    found, pending, position = [], b"", HEADER
    while position + HEADER <= len(data):
        space = BLOCK - position % BLOCK
        if space < HEADER:  # the block's zero-filled trailer
            position += space
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        payload = data[position + HEADER : position + HEADER + length]
        position += HEADER + length
        if kind == FULL:
            found.append(payload)
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            found.append(pending + payload)
        else:  # zero padding at the end of the file
            break
    parsed = []
    for payload in found:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        parsed.append(record)
    return parsed


def read_run(run_dir: Path) -> dict[str, Any]:
    """The W&B run of one of our run directories: its run record, config, history rows,
    summary and saved files (merged over every offline-run folder of that run id)."""
    files = sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))
    assert files, f"no W&B offline run under {run_dir}/wandb"
    run: dict[str, Any] = {"history": [], "config": {}, "summary": {}, "files": [], "runs": []}
    for path in files:
        for record in records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run["runs"].append(record.run)
                for item in record.run.config.update:
                    run["config"][item.key] = json.loads(item.value_json)
            elif kind == "config":
                for item in record.config.update:
                    run["config"][item.key] = json.loads(item.value_json)
            elif kind == "history":
                run["history"].append(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
            elif kind == "summary":
                for item in record.summary.update:
                    run["summary"][item.key or "/".join(item.nested_key)] = json.loads(
                        item.value_json
                    )
            elif kind == "files":
                run["files"] += [f.path for f in record.files.files]
    return run
