"""spikes.png: each spiking layer's firing rate (rows) at each evaluation (columns), drawn with
matplotlib from the run's spikes.json.

Why a child process: matplotlib's import and first layout take about a second of CPU, more
than the spike measurement itself costs a short run (bench/spikes_cost.py). So the run's rank 0
hands each evaluation's drawing to `FigureProcess`, whose child imports matplotlib once, while
the run trains; the run waits only for the last drawing, at its end (bench/spikes_figure.py
measures both). By hand: `python -m experiments.snn.spikes_figure RUN_DIR`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from experiments.snn.spikes_file import FIGURE, SATURATED, read

log = logging.getLogger(__name__)

MAX_COLUMNS = 40  # evaluations the figure shows: a long run's evenly spaced, the last included
MAX_ANNOTATED_CELLS = 600  # beyond this the rates are not written in their cells (unreadable)
SILENT_COLOUR = "#c8c8c8"
SATURATED_COLOUR = "#c82828"
DRAW_TIMEOUT_S = 120.0


def shown_evaluations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most MAX_COLUMNS evaluations, evenly spaced, the first and the last included."""
    if len(records) <= MAX_COLUMNS:
        return records
    last = len(records) - 1
    return [records[round(i * last / (MAX_COLUMNS - 1))] for i in range(MAX_COLUMNS)]


def draw(run_dir: Path) -> Path | None:
    """The run's figure from its spikes.json, written atomically; None when no evaluation
    was measured."""
    records = shown_evaluations(read(run_dir))
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap

    from experiments.report.points import save_png

    names = [layer["layer"] for layer in records[-1]["layers"]]
    rates = np.full((len(names), len(records)), np.nan)
    for column, record in enumerate(records):
        by_layer = {layer["layer"]: layer["firing_rate"] for layer in record["layers"]}
        for row, name in enumerate(names):
            rates[row, column] = by_layer.get(name, math.nan)
    active = rates[np.isfinite(rates) & (rates > 0) & (rates < SATURATED)]
    highest = float(active.max()) if active.size else 1.0

    label_width = 0.09 * max(len(name) for name in names)
    figure, axes = plt.subplots(
        figsize=(min(3.0 + label_width + 0.75 * len(records), 40.0), 1.8 + 0.3 * len(names))
    )
    healthy = np.ma.masked_where(~np.isfinite(rates) | (rates <= 0) | (rates >= SATURATED), rates)
    image = axes.imshow(healthy, cmap="viridis", vmin=0.0, vmax=highest, aspect="auto")
    silent = np.ma.masked_where(~(np.isnan(rates) | (rates <= 0)), np.ones_like(rates))
    axes.imshow(silent, cmap=ListedColormap([SILENT_COLOUR]), aspect="auto")
    saturated = np.ma.masked_where(~(rates >= SATURATED), np.ones_like(rates))
    axes.imshow(saturated, cmap=ListedColormap([SATURATED_COLOUR]), aspect="auto")
    if rates.size <= MAX_ANNOTATED_CELLS:
        for (row, column), rate in np.ndenumerate(rates):
            if math.isnan(rate):
                shown = "-"
            elif rate == 0:
                shown = "0"
            else:
                shown = f"{rate:.3f}" if rate >= 1e-3 else f"{rate:.0e}"
            dark_cell = 0 < rate < SATURATED and rate < 0.6 * highest
            axes.text(
                column,
                row,
                shown,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark_cell else "black",
            )
    axes.set_xticks(range(len(records)), [f"step {record['step']}" for record in records])
    axes.tick_params(axis="x", labelrotation=45, labelsize=8)
    axes.set_yticks(range(len(names)), names, fontsize=8)
    axes.set_title(
        f"Firing rate per layer (spikes / neuron / step) at {len(records)} evaluation(s); "
        "grey: silent, red: saturated",
        fontsize=9,
    )
    figure.colorbar(image, ax=axes, fraction=0.04, pad=0.02)
    path = run_dir / FIGURE
    save_png(figure, path)
    plt.close("all")
    return path


class FigureProcess:
    """A child that imports matplotlib once and redraws a run's figure each time it is asked.

    Rank 0 asks after every measured evaluation without waiting, so the figure on disk follows
    the run (a run killed mid-way keeps its last one) and the drawing overlaps training; at the
    end it waits only for the drawing still in flight."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None

    def request(self, run_dir: Path) -> None:
        """Redraw `run_dir`'s figure (starting the child at the first request)."""
        if self._process is None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "experiments.snn.spikes_figure", "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=os.environ.copy(),
            )
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(f"{run_dir}\n")
            self._process.stdin.flush()
        except OSError as error:  # the child is gone: finish() says so
            log.warning("spikes.png: the figure process stopped (%s)", error)

    def finish(self, run_dir: Path) -> Path | None:
        """The figure of the last request, once drawn (asked now if nothing was asked: a run
        resumed after its last evaluation); None, with a warning, if the child could not draw
        it: the figure never fails a run."""
        if self._process is None:
            self.request(run_dir)
        assert self._process is not None
        try:
            answers, _ = self._process.communicate(timeout=DRAW_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process = None
            log.warning("spikes.png: not drawn within %.0f s", DRAW_TIMEOUT_S)
            return None
        except OSError as error:
            self._process = None
            log.warning("spikes.png: the figure process stopped (%s)", error)
            return None
        self._process = None
        lines = answers.splitlines()
        if not lines or not lines[-1].strip():
            log.warning("spikes.png: not drawn (the figure process's lines above say why)")
            return None
        return Path(lines[-1].strip())

    def close(self) -> None:
        """A run that stops short (a failure, the spike guard) does not wait for its figure:
        the child finishes the drawings already asked for on its own and ends, so the run
        directory keeps the figure of its last evaluation."""
        if self._process is not None and self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        self._process = None


def _serve() -> None:
    """The child's side: import matplotlib now, then draw each run directory read from
    stdin, answering each with the figure's path (an empty line when nothing was drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # the import is the work done ahead of time

    for line in sys.stdin:
        try:
            drawn = draw(Path(line.strip()))
        except Exception as error:  # a figure never fails the run: say why, answer nothing
            print(f"spikes.png: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
            drawn = None
        _answer(str(drawn or ""))


def _answer(line: str) -> None:
    """The drawn figure's path to the run. A run that stopped short has gone without reading
    it (close()): the drawings it asked for are still made, and its answers go nowhere, as
    Python's documentation advises for a closed pipe (a traceback would land on the run's
    stderr, below its one error line)."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.snn.spikes_figure",
        description="Draw a run's spikes.png from its spikes.json.",
    )
    parser.add_argument("run_dir", nargs="?", type=Path, help="the run directory")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve()
        return
    if args.run_dir is None:
        parser.error("a run directory is required")
    drawn = draw(args.run_dir)
    if drawn is None:
        print(f"error: no evaluation in {args.run_dir / 'spikes.json'}", file=sys.stderr)
        sys.exit(1)
    print(drawn)


if __name__ == "__main__":
    main()
