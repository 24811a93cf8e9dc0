"""Hydra callback that validates the composed config before Hydra writes anything.

Hydra creates the run directory (and `.hydra/`) inside `run_job`, after `on_run_start`.
Validating here means a bad config, or a dry run, leaves no directory behind.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from experiments import composition_errors, role
from experiments.composition import plain, sweep_points
from experiments.errors import ConfigError
from experiments.launchers import sweep
from experiments.launchers.command import COMMAND_ENV, swept, user_command
from experiments.role import Kind

# Set once Hydra composed the config: an exit status 1 before that is a composition error.
composed = False
# The plan on_run_start built for a single run; the task function reuses it instead of
# validating (and building the model on the meta device) a second time.
planned: Any = None
# How many points a basic-sweeper sweep has (None: a sweeper that picks them as it goes).
sweep_size: int | None = None
# The plans on_multirun_start built for a basic-sweeper sweep's points, by run directory: the
# login's task function launches each point with its plan instead of composing and checking it
# a second time (~0.2-0.7 s a point on a quiet machine, each SNN plan builds its model).
sweep_plans: dict[Path, Any] = {}


def print_config_error(error: ConfigError) -> None:
    print(f"error: {error}", file=sys.stderr)


def _refuse_on_failure(hook: Callable[..., None]) -> Callable[..., None]:
    """Hydra turns an exception raised in a callback into a warning and goes on to launch.
    Validation and dry runs must never fall through to a run: a ConfigError is its one-line
    message, anything else one line naming the failure, and the process ends with exit 2.
    A dry run whose stdout was closed (`| head`, a pager) ends quietly with exit 0."""

    @functools.wraps(hook)
    def checked(*args: Any, **kwargs: Any) -> None:
        try:
            hook(*args, **kwargs)
        except BrokenPipeError:
            _quiet_exit()
        except ConfigError as error:
            print_config_error(error)
            sys.exit(ConfigError.exit_code)
        except Exception as error:
            print(
                f"error: the config could not be checked ({type(error).__name__}: "
                f"{_first_line(error)}); nothing was started or written",
                file=sys.stderr,
            )
            sys.exit(ConfigError.exit_code)

    return checked


def _quiet_exit() -> None:
    """stdout is gone: point it at /dev/null so the interpreter's final flush cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def asked_for_sweep() -> bool:
    """Whether the user's command is a sweep (launchers/command.py `swept`), read from the
    command the user typed, which Slurm jobs and torchrun workers inherit (COMMAND_ENV)."""
    return swept(user_command())


def _start_search(config: DictConfig) -> None:
    """One point a search may run is checked before it opens its study: a search its trials
    could never serve stops here. The plan is trial 0's directory's for the dry run to show;
    for the check, a name no trial has (its record would hold trial 0's own parameters when
    a search is continued)."""
    from experiments.plan import build_plan

    cfg = _compose_point(config, _search_point(config))
    run_dir = Path(config.hydra.sweep.dir).absolute() / ("0" if config.dry_run else "base")
    plan = build_plan(cfg, run_dir, [], dict(cfg.hydra.runtime.choices))
    _preflight([(plan, cfg)], config)  # dry_run=doctor: the table, and exit
    if config.dry_run:
        _print(
            "dry run: this sweeper chooses its points while it runs; the plan of one of them "
            "follows (each searched parameter at its first choice or lower bound)."
        )
        _print(json.dumps(plan.as_dict(), indent=2) if config.dry_run == "json" else plan.as_text())
        sys.exit(0)
    _say_launch_notes([plan])
    _hold_sweep(config)
    _write_preflight_tokens([(plan, cfg)], config)
    _prepare_loggers(config)


def _checked_values(cfg: DictConfig) -> dict[str, Any]:
    from experiments.composition import _placeholder_root_for_dry_run, _resolve

    return _resolve(_placeholder_root_for_dry_run(cfg))


def _preflight(pairs: list[tuple[Any, DictConfig]], config: DictConfig) -> None:
    """The environment's checks (preflight.py) for a run or each point of a sweep, before
    anything is written or submitted: `dry_run=doctor` prints them all as a table (exit 1 when
    one fails); a run with `preflight: true` stops at the first failures, one line each, exit
    2. A Slurm login answers for what it can see; its tasks count their own GPUs."""
    doctor = config.dry_run == "doctor"
    if not doctor and (config.dry_run or not config.get("preflight", True)):
        return
    from experiments import preflight

    gpus_here = config.launcher.get("name") != "slurm"
    checks: list[Any] = []
    for plan, cfg in pairs:
        checks += preflight.login(plan, _checked_values(cfg), gpus_here=gpus_here)
    checks = list(dict.fromkeys(checks))  # a sweep's points mostly share theirs
    if doctor:
        _print(preflight.as_table(checks))
        sys.exit(0 if all(check.ok for check in checks) else 1)
    failed = [check for check in checks if not check.ok]
    for check in failed:
        print(f"error: {check.line()}", file=sys.stderr)
    if failed:
        sys.exit(ConfigError.exit_code)


def _write_preflight_tokens(pairs: list[tuple[Any, DictConfig]], config: DictConfig) -> None:
    """A Slurm sweep's points get the login's view in their sweep directory: a task that does
    not find it runs on a node that does not see this directory (preflight.task)."""
    if config.launcher.get("name") != "slurm" or not config.get("preflight", True):
        return
    from experiments import preflight

    for plan, cfg in pairs:
        preflight.write_token(plan, _checked_values(cfg))


def _say_launch_notes(plans: list[Any]) -> None:
    """At submission, what the jobs ask for (Slurm's resources), once per distinct line, on
    stdout with the rest of the submission's account (stderr keeps its one-line errors)."""
    notes = (line for plan in plans for line in getattr(plan, "launch_notes", []))
    for line in dict.fromkeys(notes):
        print(line, flush=True)


def _print(text: str) -> None:
    """Print and flush now, so a closed stdout is noticed here (and handled) rather than at
    the interpreter's exit."""
    print(text)
    sys.stdout.flush()


def _fixed_overrides(overrides: list[str]) -> list[str]:
    """The overrides that are not sweeps (`a,b`, `range()`, `interval()`, `choice()`), for
    planning a search whose points are chosen while it runs (_search_point)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [o.input_line for o in parsed if not o.is_sweep_override()]


def _search_point(config: DictConfig) -> list[str]:
    """One point an Optuna search may run: its fixed overrides, and each searched parameter
    (the command line's and the preset's hydra.sweeper.params, the command line winning, as
    the sweeper reads them) at its first choice or lower bound. A mandatory key the search
    sets (data.root=choice(...)) is then set, and the point is as real as any trial."""
    from experiments.sweepers.search_space import from_overrides

    task = list(config.hydra.overrides.task)
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    searched, _ = from_overrides([*(f"{k}={v}" for k, v in params.items()), *task])

    def first(distribution: Any) -> Any:
        choices = getattr(distribution, "choices", None)
        return choices[0] if choices is not None else distribution.low

    return [*_fixed_overrides(task), *(f"{k}={first(d)}" for k, d in searched.items())]


def _compose_point(config: DictConfig, overrides: list[str]) -> DictConfig:
    """A point's config as its run composes it, with the sweep's own sweeper (a hydra
    override such as hydra/sweeper=optuna_resumable is not among a point's task overrides):
    the point's plan checks what it must serve (search direction, pruner)."""
    from hydra import compose
    from omegaconf import open_dict

    name = config.hydra.job.config_name
    choices = composition_errors.choices_of(name, overrides)  # (asked only when refused)
    with composition_errors.refused_as_config_errors(overrides, choices):
        cfg = compose(name, overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.sweeper = config.hydra.sweeper
    return cfg


def _verdict_lines(points: list[list[str]], plans: list[Any]) -> str:
    """One line per point: the values that differ between points, and plans/refused."""
    keys: dict[str, set[str]] = {}
    for overrides in points:
        for override in overrides:
            key, _, value = override.partition("=")
            keys.setdefault(key, set()).add(value)
    swept = [key for key, values in keys.items() if len(values) > 1]
    lines = [f"sweep of {len(points)} points (swept: {', '.join(swept) or 'nothing'}):"]
    for number, (overrides, plan) in enumerate(zip(points, plans, strict=True)):
        shown = [o for o in overrides if o.partition("=")[0] in swept]
        verdict = "plans" if plan is not None else "REFUSED (see below)"
        lines.append(f"  point {number}: {' '.join(shown) or '(base config)'}  -> {verdict}")
    return "\n".join(lines)


def _hold_sweep(config: DictConfig) -> None:
    """One launch per sweep directory: a second launch of a running sweep is refused here,
    before it writes anything (run/lock.py; released when this process ends). A local
    sweep's login also takes Ctrl-C from here on (launchers/local.py)."""
    from experiments.run import lock

    lock.hold(Path(config.hydra.sweep.dir), lock.SWEEP_LOCK)
    sweep.login_catches_ctrl_c(config)


def stop_sweep(hydra_cfg: Any) -> None:
    """Ctrl-C at a local sweep, once the running point has stopped: write the report, say
    what stopped, what never started and how to continue, exit 130 (as a shell reports
    Ctrl-C). Called by the task function in the login, between points."""
    from experiments.report import format_outcome, write_report

    sweep_dir = Path(hydra_cfg.sweep.dir)
    outcome = write_report(sweep_dir)
    print(format_outcome(sweep_dir, outcome))
    done = {row["point"] for row in outcome["rows"] if row["status"] == "completed"}
    total = sweep_size if sweep_size is not None else len(outcome["rows"])
    left = [str(n) for n in range(total) if str(n) not in done]
    print(
        f"Ctrl-C: the sweep stopped; {len(done)} of {total} points completed"
        + (f", points {', '.join(left)} to do" if left else "")
        + " (interrupted points resume from their checkpoints). The same command continues "
        f"the sweep: {user_command()}",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(130)


def _prepare_loggers(config: DictConfig) -> None:
    """The sweep's shared logger stores, made once here rather than by racing points."""
    if not config.get("logger"):
        return
    from experiments import loggers

    loggers.prepare_sweep(plain(config.logger), Path(config.hydra.sweep.dir))


class ExperimentsCallback(Callback):
    """Checks every run and sweep point before launch; keeps the sweep report current."""

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        """Keep the sweep report current as points finish (also on Slurm nodes: the job's
        rank 0, the one writer among its tasks)."""
        process = role.of_process(config.hydra.mode)
        if process.kind is Kind.SWEEP_LOGIN or (process.kind is Kind.SLURM_TASK and process.owner):
            from experiments.report import update_report

            try:
                update_report(
                    Path(config.hydra.sweep.dir), point=Path(config.hydra.runtime.output_dir).name
                )
            except Exception as error:  # a report must never turn a finished point into a failure
                logging.getLogger(__name__).warning("sweep report not updated: %s", error)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from experiments.report import format_outcome, format_run_outcome, write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep.submits_without_waiting(config):
            print(sweep.how_to_follow(sweep_dir))
            return
        outcome = write_report(sweep_dir)
        single = outcome["points"] == 1 and not asked_for_sweep()  # e.g. launcher=slurm
        print((format_run_outcome if single else format_outcome)(sweep_dir, outcome))
        if config.get("logger"):
            from experiments import loggers

            shipped = [sweep_dir / name for name in ("report.md", "report.csv")]
            shipped += [sweep_dir / name for name in outcome["figures"]]
            loggers.log_sweep_report(
                plain(config.logger),
                sweep_dir,
                [path for path in shipped if path.exists()],
            )
        unreadable = [r for r in outcome["rows"] if r["status"] == "unreadable"]
        if outcome["failed"] or outcome["interrupted"] or unreadable:
            sys.exit(1)

    @_refuse_on_failure
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Check every point of the sweep before the first one starts or is queued."""
        global composed
        composed = True
        composition_errors.composed()
        from experiments.plan import build_plan

        # The command the user typed, recorded by every point (Slurm jobs inherit it).
        os.environ.setdefault(COMMAND_ENV, user_command())
        points = sweep_points(config)
        if points is None:  # e.g. Optuna: it picks points while it runs
            sweep.refuse_search_without_waiting(config)  # (one line, exit 2: the decorator)
        if not config.dry_run:
            sweep.before_submission(config)  # Slurm: no sbatch is one line, no file
        if points is None:
            _start_search(config)
            return
        global sweep_size, sweep_plans
        sweep_size = len(points)
        sweep_plans = {}
        swept = asked_for_sweep() or len(points) > 1
        plans: list[Any] = []
        cfgs: list[Any] = []
        refusals: list[tuple[int, str]] = []
        for number, overrides in enumerate(points):
            run_dir = Path(config.hydra.sweep.dir).absolute() / str(number)
            try:
                cfg = _compose_point(config, overrides)
                plans.append(build_plan(cfg, run_dir, overrides, dict(cfg.hydra.runtime.choices)))
                cfgs.append(cfg)
            except ConfigError as error:
                plans.append(None)
                refusals.append((number, str(error)))
            except Exception as error:  # e.g. an unknown key in one point's overrides
                plans.append(None)
                refusals.append((number, f"{type(error).__name__}: {_first_line(error)}"))
        sweep.plan_launch(config, plans)  # Slurm: the points as one job array
        if config.dry_run in (True, "true") and swept:
            _print(_verdict_lines(points, plans))
        for number, message in refusals:
            shown = " ".join(o for o in points[number] if not o.startswith("dry_run="))
            where = f"sweep point {number} ({shown}): " if swept else ""
            print(f"error: {where}{message}", file=sys.stderr)
        if refusals:
            sys.exit(ConfigError.exit_code)
        _preflight(list(zip(plans, cfgs, strict=True)), config)
        if config.dry_run == "json":
            # A plain command (launcher=slurm runs as a one-point sweep) prints one plan.
            output = [plan.as_dict() for plan in plans] if swept else plans[0].as_dict()
            _print(json.dumps(output, indent=2))
            sys.exit(0)
        if config.dry_run:
            for number, plan in enumerate(plans):
                if swept:
                    _print(f"--- sweep point {number}: {' '.join(points[number])}")
                _print(plan.as_text())
            sys.exit(0)
        _say_launch_notes(plans)
        _hold_sweep(config)
        from experiments.run.summary import record_extensions

        for plan in plans:  # a point's job plans against its rewritten config: record it here
            record_extensions(plan)
        _write_preflight_tokens(list(zip(plans, cfgs, strict=True)), config)
        _prepare_loggers(config)
        sweep_plans = {plan.run_dir: plan for plan in plans}

    @_refuse_on_failure
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        global composed, planned
        composed = True
        composition_errors.composed()
        from experiments.plan import build_plan
        from experiments.run import lock

        HydraConfig.instance().set_config(config)  # lets ${hydra:...} resolve this early
        hydra = config.hydra
        process = role.of_process(hydra.mode)  # a run's own process, or one it started
        if process.kind is Kind.RUN and not config.dry_run:
            lock.refuse_if_held(Path(hydra.run.dir))  # another run's: say so, not its config
        plan = build_plan(
            config,
            Path(hydra.run.dir).absolute(),
            list(hydra.overrides.task),
            dict(hydra.runtime.choices),
            check_record=process.kind is not Kind.SWEEP_POINT,  # its login compared them
        )
        planned = plan
        if process.launched:  # the launching process printed the plan and wrote .hydra/
            if process.owner:  # a sweep's point owns its directory (torchrun's ranks do not)
                lock.hold(plan.run_dir)
                lock.check_readable(plan.run_dir)
            return
        _preflight([(plan, config)], config)
        if config.dry_run == "json":
            _print(json.dumps(plan.as_dict(), indent=2))
            sys.exit(0)
        if config.dry_run:
            _print(plan.as_text())
            sys.exit(0)
        # Before Hydra makes the directory or writes .hydra/: a second run is refused here,
        # having written nothing (run/lock.py). Multi-node torchrun: every node's launching
        # process runs this command; they share one token and join one another.
        from experiments.launchers import torchrun

        lock.hold(plan.run_dir, shared=torchrun.launch_token(plan))
        lock.check_readable(plan.run_dir)
