"""Stop at a step boundary when Slurm asks, with a checkpoint first.

Slurm sends SIGTERM before it kills a job (`scontrol requeue`, `scancel`, preemption) and
submitit asks for SIGUSR2 `signal_delay_s` before the time limit. Both only set a flag here;
the training loop agrees on it across ranks after a step, saves a checkpoint, then hands the
signal to the handler that was there before (submitit's: it requeues the job on SIGUSR2) and
exits. The requeued job resumes from that checkpoint, so nothing trained is lost.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


class GracefulStop:
    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum

    def requested(self, any_rank: Callable[[bool], bool]) -> bool:
        """True on every rank once any rank got a signal (a collective: call it on all ranks)."""
        return any_rank(self.received is not None)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def hand_over(self) -> None:
        """Give the signal to the previous handler (submitit requeues on SIGUSR2), then exit.

        When submitit will not requeue (`launcher.max_requeues` used up: "timed-out too many
        times"), the run still stopped cleanly after a checkpoint: it ends as interrupted,
        with the reason, and a rerun resumes it."""
        signum = self.received if self.received is not None else signal.SIGTERM
        previous = self._previous.get(signum)
        self.restore()
        reason = f"stopped on signal {signal.Signals(signum).name} after a checkpoint"
        if callable(previous):
            try:
                previous(signum, None)  # submitit's handler exits on rank 0 after requeueing
            except Exception as error:  # submitit: "Job not requeued because: ..."
                reason = f"{reason}; {error}"
        raise Interrupted(128 + signum, reason)


class Interrupted(SystemExit):
    """The run stopped at a step boundary after a checkpoint, on a signal; `reason` says why
    and whether the job was requeued."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(code)
        self.reason = reason
