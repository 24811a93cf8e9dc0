"""spikes.png (snn/spikes_figure.py): drawn with matplotlib from spikes.json, silent layers grey
and saturated ones red, by a child process the run started ahead of time; a figure that cannot
be drawn never fails the run. The figure of a real run is read in test_main_job.py (its size)
and test_loggers.py (an artifact of MLflow and W&B)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from PIL import Image

from experiments.snn import spikes_figure
from experiments.snn.spikes_file import SPIKES_FILE

from .conftest import cli_env


def _write_spikes(run_dir: Path, rates: dict[str, list[float]]) -> None:
    """spikes.json as the run writes it: one record per evaluation, each layer's rate."""
    evaluations = len(next(iter(rates.values())))
    records = [
        {
            "step": 10 * (column + 1),
            "layers": [
                {"layer": name, "firing_rate": by_evaluation[column]}
                for name, by_evaluation in rates.items()
            ],
        }
        for column in range(evaluations)
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SPIKES_FILE).write_text(json.dumps({"evaluations": records}))


def _pixels_of(path: Path, colour: str) -> int:
    wanted = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    image = Image.open(path).convert("RGB")
    return sum(1 for pixel in image.get_flattened_data() if pixel == wanted)


def test_the_figure_marks_silent_and_saturated_layers(tmp_path: Path) -> None:
    troubled = tmp_path / "troubled"
    _write_spikes(
        troubled,
        {"conv1.sn": [0.12, 0.10], "layer1.sn": [0.0, 0.0], "layer2.sn": [1.0, 0.995]},
    )
    healthy = tmp_path / "healthy"
    _write_spikes(healthy, {"conv1.sn": [0.12, 0.10], "layer1.sn": [0.05, 0.04]})

    figure = spikes_figure.draw(troubled)
    assert figure == troubled / "spikes.png"
    assert _pixels_of(figure, spikes_figure.SILENT_COLOUR) > 500
    assert _pixels_of(figure, spikes_figure.SATURATED_COLOUR) > 500
    plain = spikes_figure.draw(healthy)
    assert plain is not None
    assert _pixels_of(plain, spikes_figure.SILENT_COLOUR) < 50
    assert _pixels_of(plain, spikes_figure.SATURATED_COLOUR) < 50


def test_a_long_run_shows_evenly_spaced_evaluations_the_last_included() -> None:
    records = [{"step": step} for step in range(1, 101)]
    shown = spikes_figure.shown_evaluations(records)
    assert len(shown) == spikes_figure.MAX_COLUMNS
    assert shown[0]["step"] == 1 and shown[-1]["step"] == 100


def test_the_figure_child_draws_when_asked_and_never_fails_the_run(tmp_path: Path) -> None:
    """The child redraws the run after each request, and at the end hands back the last
    figure; a run whose spikes.json became unreadable gets no figure and a warning instead of
    an exception; by hand, a run without evaluations exits 1 with one line."""
    run_dir = tmp_path / "run"
    _write_spikes(run_dir, {"conv1.sn": [0.2], "fc.sn": [0.3]})
    child = spikes_figure.FigureProcess()
    child.request(run_dir)  # the first evaluation
    _write_spikes(run_dir, {"conv1.sn": [0.2, 0.25, 0.3], "fc.sn": [0.3, 0.35, 0.4]})
    child.request(run_dir)  # the third: the figure at the end shows all three
    assert child.finish(run_dir) == run_dir / "spikes.png"
    three_columns = Image.open(run_dir / "spikes.png").size[0]
    _write_spikes(run_dir, {"conv1.sn": [0.2], "fc.sn": [0.3]})
    assert spikes_figure.draw(run_dir) == run_dir / "spikes.png"
    assert Image.open(run_dir / "spikes.png").size[0] < three_columns

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / SPIKES_FILE).write_text("{")
    assert spikes_figure.FigureProcess().finish(broken) is None
    assert not (broken / "spikes.png").exists()

    by_hand = subprocess.run(
        [sys.executable, "-m", "experiments.snn.spikes_figure", str(broken)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert by_hand.returncode == 1
    assert by_hand.stderr.strip() == f"error: no evaluation in {broken / SPIKES_FILE}"


def test_a_run_that_stopped_short_gets_its_figure_and_no_traceback(tmp_path: Path) -> None:
    """A run stopped by the guard or a failure closes the child's pipes without reading its
    answers and exits: the child still draws what it was asked, and its answers into the
    closed pipe put no traceback on the run's stderr (below the run's one error line)."""
    run_dir = tmp_path / "run"
    _write_spikes(run_dir, {"conv1.sn": [0.2, 0.0], "fc.sn": [0.3, 0.0]})
    child = subprocess.Popen(
        [sys.executable, "-m", "experiments.snn.spikes_figure", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the run is gone: nobody reads the answers
    child.stdin.write(f"{run_dir}\n{run_dir}\n")
    child.stdin.close()
    assert child.wait(timeout=120) == 0
    assert child.stderr.read() == ""
    assert (run_dir / "spikes.png").exists()
