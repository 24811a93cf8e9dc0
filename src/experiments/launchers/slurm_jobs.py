"""The login side of a Slurm sweep: submit the points as one job array, wait, and read how each
job ended into its run directory.

hydra-submitit-launcher's own `launch` (followed here step by step) ends with
`[job.results()[0] for job in jobs]`: the first job that did not return (a rank died, the time
limit killed it, its last allowed requeue was used) raises there, and a traceback replaces the
sweep's outcome. Here each job's end is read on its own: what its rank 0 recorded, else failed
with the dead rank's own record (run/failures.py) or, when no rank wrote one (a SIGKILL, an OOM
kill), Slurm's word for the job and the task's log. Its value is then NaN (Optuna marks the
trial failed); the report decides the exit status.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import DictConfig, OmegaConf

from experiments.run import failures
from experiments.run.record import read_json, read_summary, write_json_atomic

log = logging.getLogger(__name__)

# Seconds between two questions to Slurm about the jobs the login process waits for.
POLL_S = 5.0
# Outcomes a job's rank 0 writes itself; anything else means it could not.
RECORDED = ("completed", "failed", "interrupted")
# The code snapshot this login took for each sweep directory (launchers/snapshot.py).
_snapshots: dict[Path, Path] = {}


def launch(
    launcher: Any, config: DictConfig, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[JobReturn]:
    jobs = submit(launcher, config, job_overrides, initial_job_idx)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    if not config.launcher.get("wait", True):  # launcher.wait=false: the jobs record themselves
        return [
            JobReturn(
                overrides=list(overrides),
                working_dir=str(sweep_dir / str(idx)),
                status=JobStatus.COMPLETED,
                _return_value=None,
            )
            for idx, overrides in enumerate(job_overrides, start=initial_job_idx)
        ]
    return [
        outcome(job, list(overrides), sweep_dir / str(idx))
        for idx, (job, overrides) in enumerate(
            zip(jobs, job_overrides, strict=True), start=initial_job_idx
        )
    ]


def submit(
    launcher: Any, config: DictConfig, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[Any]:
    """The points as one job array, without waiting (an Optuna search refills a slot as soon
    as one of its jobs ends: sweepers/optuna.py)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = launcher.params
    init_params = {"folder": params["submitit_folder"]}
    specific_init_keys = {"max_num_timeout"}
    init_params.update(
        **{f"{launcher._EXECUTOR}_{x}": y for x, y in params.items() if x in specific_init_keys}
    )
    init_keys = specific_init_keys | {"submitit_folder"}
    executor = submitit.AutoExecutor(cluster=launcher._EXECUTOR, **init_params)
    baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(
        **{
            x if x in baseparams else f"{launcher._EXECUTOR}_{x}": y
            for x, y in params.items()
            if x not in init_keys
        }
    )
    sweep_dir = Path(str(config.hydra.sweep.dir))
    log.info(f"Submitit '{launcher._EXECUTOR}' sweep output dir : {sweep_dir}")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if "mode" in config.hydra.sweep:
        os.chmod(sweep_dir, mode=int(str(config.hydra.sweep.mode), 8))

    folder = None
    if config.launcher.get("snapshot", True):
        from experiments.launchers import snapshot

        # One copy per login: a search's later batches run the code its first one ran.
        folder = _snapshots.get(sweep_dir) or _snapshots.setdefault(
            sweep_dir, snapshot.take(sweep_dir)
        )
        setup = [*snapshot.setup_lines(folder), *(params.get("setup") or [])]
        executor.update_parameters(**{f"{launcher._EXECUTOR}_setup": setup})

    job_params: list[Any] = []
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        job_params.append(
            (list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state())
        )
    from experiments.launchers import slurm

    jobs: list[Any] = []
    size = slurm.max_array_size()
    try:
        for start in range(0, len(job_params), size):  # more than MaxArraySize: several arrays
            chunk = job_params[start : start + size]
            jobs += _map_array(executor, launcher, chunk, config)
    except BaseException:  # sbatch refused (one line: _map_array): no copy left for nothing
        if folder is not None and not jobs and _snapshots.get(sweep_dir) == folder:
            import shutil

            del _snapshots[sweep_dir]
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                folder.parent.rmdir()  # .snapshot/, when it held only this copy
        raise
    record_submission(sweep_dir, config, job_overrides, initial_job_idx, jobs, folder)
    return jobs


def _map_array(executor: Any, launcher: Any, chunk: list[Any], config: DictConfig) -> list[Any]:
    """One job array. A refused sbatch is one line with Slurm's reason and the `launcher.*`
    key to change (slurm.refusal), and the login exits: submitit would print sbatch's stderr
    and raise FailedJobError, which Hydra shows as a 40-line traceback."""
    import io
    import sys

    from submitit.core.utils import FailedJobError

    from experiments.errors import ConfigError
    from experiments.launchers import slurm

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's stderr
            return executor.map_array(launcher, *zip(*chunk, strict=True))
    except FailedJobError as error:
        fields = OmegaConf.to_container(config.launcher, resolve=True, enum_to_str=True)
        line, is_config = slurm.refusal(str(error), fields)  # type: ignore[arg-type]
        print(line, file=sys.stderr)
        raise SystemExit(ConfigError.exit_code if is_config else 1) from None


def record_submission(
    sweep_dir: Path,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    jobs: list[Any],
    folder: Path | None,
) -> dict[str, Any]:
    """What the login submitted, kept in the sweep directory (experiments-status reads it: a
    point whose job has not started has no directory yet). A search submits batch after
    batch, and a continued sweep again: each submission adds its points (a point submitted
    again keeps its newest job)."""
    from experiments.launchers.command import user_command
    from experiments.status import SUBMITTED

    path = sweep_dir / SUBMITTED
    record = read_json(path) or {"points": {}, "submissions": []}
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs}, key=int)
    record["submissions"].append(
        {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": user_command(),
            "arrays": arrays,
            "snapshot": str(folder) if folder else None,
            "wait": bool(config.launcher.get("wait", True)),
        }
    )
    for idx, (job, overrides) in enumerate(zip(jobs, job_overrides, strict=True), initial_job_idx):
        record["points"][str(idx)] = {"job_id": str(job.job_id), "overrides": list(overrides)}
    write_json_atomic(path, record)
    return record


def ended(jobs: Sequence[Any]) -> list[bool]:
    """Whether Slurm says each job ended, from one sacct call made now. submitit's watcher asks
    Slurm less and less often (after 2, 4, 8, ... s, then once a minute): `done(force_check=
    True)` forces that call for a one-task job only; a multi-task job asks each of its tasks
    without forcing, and a job that ran a minute was noticed up to a minute after it ended.
    Forcing the watcher itself (one sacct call for every job it knows) serves both."""
    if jobs:
        jobs[0].watcher.update_if_long_enough("force")  # one watcher per job class
    return [bool(job.done()) for job in jobs]


def _wait(job: Any) -> None:
    """Until Slurm says the job ended: one sacct call every POLL_S seconds (see `ended`)."""
    while not ended([job])[0]:
        time.sleep(POLL_S)


def outcome(job: Any, overrides: list[str], run_dir: Path) -> JobReturn:
    """The point's result is task 0's (rank 0 records the run): reading every task's, as
    `job.results()` does, waited submitit's 15 s for the result file of each task that died
    without one (a peer stopped by its watchdog), after the job had already ended."""
    _wait(job)
    first = job.task(0)
    if job.state == "COMPLETED" or first.paths.result_pickle.exists():  # (no sacct: no state)
        try:
            return first.result()
        except Exception as error:  # submitit: FailedJobError, UncompletedJobError
            said = str(error)
    else:  # failed, killed, out of time or requeues: no result file to wait for
        said = _task_log_said(job)
    record_job_end(run_dir, overrides, job, said)  # the sweep's outcome reports it
    return JobReturn(
        overrides=overrides,
        working_dir=str(run_dir),
        status=JobStatus.COMPLETED,
        _return_value=math.nan,
    )


def _task_log_said(job: Any) -> str:
    """What srun said about the job's tasks (it writes into task 0's stderr file), else the
    state Slurm gives the job."""
    try:
        text = Path(job.paths.stderr).read_text(errors="replace")
    except OSError:
        text = ""
    said = [line for line in text.splitlines() if line.startswith("srun: error:")]
    return "\n".join(said) or f"job state {job.state}"


def record_job_end(run_dir: Path, overrides: list[str], job: Any, said: str) -> dict:
    """The run's summary after its job ended without a result: as rank 0 left it when it
    could record the outcome, else failed with the best account of why."""
    summary = read_summary(run_dir) or {"overrides": overrides, "run_dir": str(run_dir)}
    if summary.get("status") in RECORDED:
        return summary
    cause = failures.cause(failures.read(run_dir))
    if cause is not None:
        summary.update(status="failed", **failures.summary_fields(cause))
    else:
        said = _slurm_said(said)
        stderr = _task_stderr(job, said)
        summary.update(
            status="failed",
            error=f"Slurm job {job.job_id}: {said} (log: {stderr})",
            failure={"error": said, "log": stderr, "logs": [stderr]},
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def _slurm_said(text: str) -> str:
    """The line that says what happened to the job: srun's report of a task (killed, exited
    with a code) if there is one, else the first line of what submitit or Slurm said."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("srun: error:"):
            return line.removeprefix("srun: error:").strip()
    return lines[0] if lines else "the job ended without a result"


def _task_stderr(job: Any, said: str) -> str:
    """The stderr file of the task srun named (", task 1: Killed"), else of task 0."""
    task = 0
    if " task " in said:
        number = said.split(" task ", 1)[1].split(":", 1)[0].strip()
        task = int(number) if number.isdigit() else 0
    try:
        return str(job.task(task).paths.stderr)
    except Exception:
        return str(job.paths.stderr)
