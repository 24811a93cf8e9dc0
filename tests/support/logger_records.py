"""Read a run's loggers back through their own APIs and files (MLflow's client, TensorBoard's
event reader, the CSV), for the logger group's tests in test_loggers.py and the GAN run's in
test_gan.py."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest


def mlflow_runs(store: Path) -> tuple[object, list]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    experiments = client.search_experiments()
    runs = [r for e in experiments for r in client.search_runs([e.experiment_id])]
    return client, runs


def history(client: object, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def tensorboard_events(log_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict]:
    """Scalars by tag, and the HParams plugin's session-start hparams."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    hparams: dict = {}
    for events in sorted(log_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in accumulator.Scalars(tag))
        try:
            contents = accumulator.PluginTagToContent("hparams").values()
        except KeyError:  # an event file without HParams data (e.g. mmcv's hook's)
            contents = []
        for content in contents:
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            if data.HasField("session_start_info"):
                for key, value in data.session_start_info.hparams.items():
                    hparams[key] = value.WhichOneof("kind") and getattr(
                        value, value.WhichOneof("kind")
                    )
    return scalars, hparams


def tensorboard_histograms(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, number of values) of each histogram logged under `tag`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: list[tuple[int, float]] = []
    for events in sorted(log_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"histograms": 0})
        accumulator.Reload()
        if tag in accumulator.Tags()["histograms"]:
            found.extend((e.step, e.histogram_value.num) for e in accumulator.Histograms(tag))
    return found


def csv_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def same(found: list, expected: list, rel: float = 1e-6) -> bool:
    """(step, value) pairs: the same steps, values equal to float32 precision."""
    assert [step for step, _ in found] == [step for step, _ in expected]
    assert [value for _, value in found] == pytest.approx([v for _, v in expected], rel=rel)
    return True
