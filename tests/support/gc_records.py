"""What the test-only sitecustomize recorded under EXPERIMENTS_TEST_RECORD_GC: the garbage
collector's thresholds and frozen objects as each process started, and at each of its
optimizer steps.

Our package makes the collector lazier while a process starts, and each engine ends that when
the library's loop starts: what is alive then is frozen and the process's own thresholds are
back (src/experiments/garbage_collection.py). MMGen's runner and the classic Trainer are seen
before their first step; SpikingJelly's loop only after it, and a resumed one also takes the
optimizer step that torch's DCP takes to give the optimizer a state to load into
(`_init_optim_state` in torch.distributed.checkpoint.state_dict: zero gradients, lr 0). So a
process's first two optimizer steps at most run under the start-up collector.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

Thresholds = tuple[int, ...]


@dataclass(frozen=True)
class Collector:
    thresholds: Thresholds
    frozen: int  # gc.get_freeze_count()


def read(folder: Path) -> dict[int, tuple[Collector, list[Collector]]]:
    """Per process (pid): the collector as it started and at each of its steps."""
    found: dict[int, tuple[Collector, list[Collector]]] = {}
    for path in sorted(folder.glob("*.txt")):
        start: Collector | None = None
        steps: list[Collector] = []
        for line in path.read_text().splitlines():
            kind, *values = line.split()
            *thresholds, frozen = (int(value) for value in values)
            collector = Collector(tuple(thresholds), frozen)
            if kind == "start":
                start = collector
            else:
                steps.append(collector)
        assert start is not None, f"{path}: no start line"
        found[int(path.stem)] = (start, steps)
    return found


def assert_loops_ran_under_the_start_thresholds(folder: Path, processes: int) -> None:
    """`processes` processes (or more) took two optimizer steps or more; in each, its steps
    after its first two at most ran under the thresholds it started with, to its last, and
    with what its start-up left alive frozen."""
    records = read(folder)
    trained = {pid: record for pid, record in records.items() if len(record[1]) >= 2}
    assert len(trained) >= processes, f"{len(trained)} processes took 2 steps: {records}"
    for pid, (start, steps) in trained.items():
        thresholds = [step.thresholds for step in steps]
        restored = (
            thresholds.index(start.thresholds) if start.thresholds in thresholds else len(steps)
        )
        assert restored <= 2 and set(thresholds[restored:]) == {start.thresholds}, (
            f"process {pid} started with {start}, stepped {steps}"
        )
        # Frozen: hundreds of thousands (a few leave as the objects are freed).
        frozen = [step.frozen for step in steps[restored:]]
        assert min(frozen) > start.frozen + 100_000, (
            f"process {pid}: frozen objects {start.frozen} at start, stepped {steps}"
        )
