"""How a sweep (or a Slurm submission, which Hydra runs as a one-point sweep) is launched,
seen from the login: what is checked before anything is submitted, how the points' plans show
the one job array they will be, and what Ctrl-C at the login does. Called by callbacks.py
through experiments.launchers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from experiments.launchers.command import user_command


def before_submission(config: DictConfig) -> None:
    """Slurm: sbatch is there and the account/partition answer; one line and nothing
    written when not (launchers/slurm.py)."""
    launcher = slurm_fields(config)
    if launcher is not None:
        from experiments.launchers import slurm

        slurm.prepare_submission(launcher)
        refuse_while_its_jobs_wait(Path(str(config.hydra.sweep.dir)))


def refuse_while_its_jobs_wait(sweep_dir: Path) -> None:
    """A sweep whose earlier submission still has jobs in Slurm's queue (a launcher.wait=false
    login that left, or a blocking one stopped with Ctrl-C) is not submitted again: its
    points would get a second job each, two jobs training one run directory."""
    from experiments import status
    from experiments.run.lock import RunDirRefused

    jobs = [str(point.get("job_id")) for point in status.submitted(sweep_dir).values()]
    try:
        live = status.live_jobs(jobs)
    except status.SlurmNotAnswering:
        return  # sbatch answered; whether the jobs still wait cannot be told here
    if live:
        refused = RunDirRefused("hydra.sweep.dir", str(sweep_dir), "in use")
        Exception.__init__(
            refused,
            f"sweep {sweep_dir} has Slurm jobs still queued or running ({' '.join(live)}): "
            f"follow them with experiments-status {sweep_dir}, or cancel them with "
            f"experiments-status --cancel {sweep_dir}; once they have ended, the same command "
            "continues the sweep",
        )
        raise refused


def plan_launch(config: DictConfig, plans: list[Any]) -> None:
    """hydra-submitit-launcher submits a sweep's points as one job array."""
    launcher = slurm_fields(config)
    if launcher is not None and len(plans) > 1:
        _as_one_array(plans, launcher, len(plans))


def submits_without_waiting(config: DictConfig) -> bool:
    """launcher=slurm launcher.wait=false: the login submits and leaves; each point's job
    records itself, and experiments-status / experiments-report read the sweep directory."""
    launcher = slurm_fields(config)
    return launcher is not None and launcher.get("wait") is False


def refuse_search_without_waiting(config: DictConfig) -> None:
    """A search (Optuna) picks each next point from the values of finished ones: nobody
    would be left to pick them."""
    if submits_without_waiting(config):
        from experiments.errors import ConfigError

        raise ConfigError(
            "launcher.wait",
            False,
            "a search chooses each next point from finished ones, so its login must wait: "
            "use launcher.wait=true, in tmux or screen, or submit the search itself as a small "
            "job (sbatch --wrap '<this command>' on a node that can run sbatch)",
        )


def how_to_follow(sweep_dir: Path) -> str:
    """What the login of a launcher.wait=false submission prints before it exits."""
    import json

    from experiments.status import SUBMITTED

    record = json.loads((sweep_dir / SUBMITTED).read_text())
    arrays = record["submissions"][-1]["arrays"]
    snapshot = record["submissions"][-1]["snapshot"]
    lines = [
        f"submitted {len(record['points'])} point(s) as Slurm job(s) {' '.join(arrays)}; "
        f"nothing waits for them here (launcher.wait=false). Recorded in {sweep_dir / SUBMITTED}"
        + (f"; the jobs run the code copied to {snapshot}" if snapshot else ""),
        f"  follow:  experiments-status {sweep_dir} [--watch 30]",
        f"  cancel:  experiments-status --cancel {sweep_dir}",
        f"  report:  experiments-report {sweep_dir}  (what has finished so far)",
    ]
    return "\n".join(lines)


def login_catches_ctrl_c(config: DictConfig) -> None:
    """From here on Ctrl-C at the sweep's login stops it the launcher's way."""
    if slurm_fields(config) is None:
        from experiments.launchers import local

        local.login_catches_ctrl_c()
    else:
        _slurm_login_catches_ctrl_c(Path(config.hydra.sweep.dir))


def slurm_fields(config: DictConfig) -> dict[str, Any] | None:
    """The launcher fields when hydra-submitit-launcher submits to Slurm, else None."""
    if not str(config.hydra.launcher.get("_target_", "")).endswith("SlurmLauncher"):
        return None
    from omegaconf import OmegaConf

    return OmegaConf.to_container(config.launcher, resolve=True)  # type: ignore[return-value]


def _as_one_array(plans: list[Any], launcher: dict[str, Any], points: int) -> None:
    """hydra-submitit-launcher submits a sweep's points as one job array, with the sweep's
    (not a point's) launcher fields: each point's plan shows that sbatch script. A sweep larger
    than the cluster's MaxArraySize goes as several arrays (slurm_jobs.submit): each point
    shows the script of its own array. (A dry run asks Slurm nothing: it splits at Slurm's
    default MaxArraySize; the submission itself reads the cluster's.)"""
    from experiments.launchers import slurm

    size = slurm.MAX_ARRAY_SIZE
    for number, plan in enumerate(plans):
        if plan is not None:
            start = number - number % size
            in_array = min(size, points - start)
            plan.launch_command = slurm.command(launcher, [], str(plan.run_dir), points=in_array)


def _slurm_login_catches_ctrl_c(sweep_dir: Path) -> None:
    """Ctrl-C at the login of a blocking Slurm sweep: the jobs are Slurm's, not this
    process's children, so they are left running (a stray Ctrl-C never throws away cluster
    work); the report is written as it stands, and the message says how to stop them."""
    import signal

    from experiments import status

    earlier = len(status.submissions(sweep_dir))  # those of a login before this one

    def handle(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C: at once
        from experiments.report import format_outcome, write_report

        try:
            print(format_outcome(sweep_dir, write_report(sweep_dir)))
        except Exception as error:  # the message below matters more than the report
            print(f"(sweep report not written: {error})", file=sys.stderr)
        ours = status.submissions(sweep_dir)[earlier:]  # recorded as sbatch answered
        named = " ".join(a for each in ours for a in each["arrays"]) or "(none submitted yet)"
        print(
            f"Ctrl-C: the Slurm jobs of this sweep were left running: {named}; they record "
            f"their points themselves. To stop them: scancel {named} (running points stop "
            "after a checkpoint, `interrupted`; pending ones never start). Once they have "
            f"ended, the same command continues the sweep: {user_command()}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(130)

    signal.signal(signal.SIGINT, handle)
