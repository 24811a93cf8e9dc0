"""TensorBoard: scalars per step and per epoch, and the HParams view (the flat config vs. the
final metrics), so a sweep compares in TensorBoard's HParams tab (`--logdir <sweep dir>`)."""

from __future__ import annotations

from typing import Any

from experiments.loggers import Logger, RunInfo

DIRNAME = "tensorboard"


class TensorBoardLogger(Logger):
    """The event file is created with the first scalar; artefacts stay in the run directory
    (TensorBoard shows scalars and hparams only)."""

    name = "tensorboard"

    def __init__(self, settings: dict[str, Any], info: RunInfo) -> None:
        super().__init__(settings, info)
        self.log_dir = info.run_dir / DIRNAME
        self._writer: Any = None

    def writer(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.log_dir))
        return self._writer

    def log(self, metrics: dict[str, float], step: int) -> None:
        for tag, value in metrics.items():
            self.writer().add_scalar(tag, value, step)

    def histogram(self, tag: str, values: list[float], step: int) -> None:
        import numpy

        self.writer().add_histogram(tag, numpy.asarray(values, dtype=float), step)

    def finish(self, status: str, metrics: dict[str, float]) -> None:
        if self.settings.get("hparams", True) and status == "completed":
            from torch.utils.tensorboard.summary import hparams

            final = {f"final/{k}": float(v) for k, v in metrics.items()}
            experiment, start, end = hparams(self.info.params, final)
            writer = self.writer()
            for summary in (experiment, start, end):
                writer.file_writer.add_summary(summary)
            for tag, value in final.items():
                writer.add_scalar(tag, value, 0)
        if self._writer is not None:
            self._writer.close()

    def mmcv_hook(self, interval: int) -> dict[str, Any] | None:
        return dict(
            type="ExperimentsTensorboardLoggerHook", log_dir=str(self.log_dir), interval=interval
        )


make = TensorBoardLogger
