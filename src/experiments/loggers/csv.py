"""CSV, as Lightning's CSVLogger: `<run>/<dir>/metrics.csv` with one row per logged step (a
new metric adds a column and the file is rewritten), and `hparams.yaml` (the flat config)."""

from __future__ import annotations

import csv
from typing import Any

from experiments.loggers import Logger, RunInfo
from experiments.run.record import atomically


class CSVLogger(Logger):
    """Every row is on disk as it is logged; the final metrics are the run's summary.json."""

    name = "csv"

    def __init__(self, settings: dict[str, Any], info: RunInfo) -> None:
        super().__init__(settings, info)
        self.uses_mmcv_hook = False  # mmcv has no CSV hook: GAN metrics come through the recorder
        self.folder = info.run_dir / settings.get("dir", "csv")
        self.path = self.folder / "metrics.csv"
        self.columns: list[str] = ["step"]
        self.rows: list[dict[str, Any]] = []

    def start(self) -> None:
        import yaml

        self.folder.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # a resumed run goes on with its earlier rows
            with open(self.path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                self.columns = list(reader.fieldnames or ["step"])
                self.rows = list(reader)
        with (
            atomically(self.folder / "hparams.yaml", fsync=False) as temporary,
            open(temporary, "w", encoding="utf-8") as handle,
        ):
            yaml.safe_dump(self.info.params, handle, sort_keys=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": step, **metrics}
        self.rows.append(row)
        new = [key for key in row if key not in self.columns]
        if new or not self.path.exists():
            self.columns += new
            self._rewrite()
            return
        with open(self.path, "a", newline="", encoding="utf-8") as handle:
            csv.DictWriter(handle, fieldnames=self.columns).writerow(row)

    def _rewrite(self) -> None:
        with (
            atomically(self.path, self.path.with_suffix(".tmp"), fsync=False) as temporary,
            open(temporary, "w", newline="", encoding="utf-8") as handle,
        ):
            writer = csv.DictWriter(handle, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(self.rows)

    def truncate(self, after_step: int) -> None:
        """A resumed run drops the rows after its checkpoint, as metrics.jsonl does."""
        kept = [row for row in self.rows if int(float(row["step"])) <= after_step]
        if len(kept) != len(self.rows) or not self.path.exists():
            self.rows = kept
            self._rewrite()


make = CSVLogger
