"""Sweep report: a table and figures built from the run directories alone.

`experiments-report <sweep dir>` rebuilds it at any time (also for Slurm sweeps whose jobs end
hours apart); the sweep callbacks update it after every point. Writes report.csv, report.md,
metric_vs_<key>.png (one per swept key), learning_curves.png and, for an Optuna search,
Optuna's own figures into the sweep directory.

Cost stays linear over a sweep: points are read through an index that parses only what changed
(points.py), and the per-point update redraws the figures at most every FIGURE_INTERVAL_S
seconds; the end of the sweep and `experiments-report` always draw them.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from experiments import tool_cli
from experiments.families import Family, for_points
from experiments.report import figures as figs
from experiments.report import seeds
from experiments.report.points import (
    FINAL,
    UNREADABLE,
    PointIndex,
    planned_points,
    replacing,
    write_table,
)
from experiments.run.search_trial import read_spec

# A point in one of these states will not change without a new launch.
DONE = (*FINAL, "interrupted", "pruned", UNREADABLE)

__all__ = ["format_outcome", "format_run", "update_report", "write_report"]

FIGURE_INTERVAL_S = 60.0


def swept_keys(points: list[dict[str, Any]]) -> list[str]:
    """Keys whose value differs between points (all of them for a single point)."""
    keys: list[str] = []
    for point in points:
        keys += [k for k in point["overrides"] if k not in keys and not k.startswith("hydra.")]
    if len(points) < 2:
        return keys
    return [k for k in keys if len({p["overrides"].get(k) for p in points}) > 1]


def rows(points: list[dict[str, Any]], keys: list[str], fam: Family) -> list[dict[str, Any]]:
    table = []
    for point in points:
        summary = point["summary"]
        metrics = summary.get("metrics") or {}
        row: dict[str, Any] = {"point": point["point"]}
        row.update({key: point["overrides"].get(key, "") for key in keys})
        row["status"] = summary.get("status", "unknown")
        row.update({name: metrics.get(name, "") for name in fam.metrics})
        row["wall_time_s"] = summary.get("wall_time_s", "")
        slurm = summary.get("slurm") or {}
        row["slurm_job"] = slurm.get("job_id", "")
        failure = summary.get("failure") or {}  # a multi-rank run: the rank that failed
        logs = failure.get("logs") or []
        failed = row["status"] == "failed"
        # the failed rank's Slurm task log when it has one, else the job's (rank 0's)
        row["slurm_log"] = (logs[1] if len(logs) > 1 else slurm.get("stderr", "")) if failed else ""
        row["log"] = failure.get("log") or ""
        row["interrupted"] = summary.get("interrupted") or ""
        row["seed"] = summary.get("seed", "")
        error = (summary.get("error") or "").splitlines()[:1]
        if failure.get("error"):
            error = [f"rank {failure.get('rank')} on {failure.get('node')}: {failure['error']}"]
        row["error"] = error[0][:160] if error else ""
        # a record cut short or unreadable (points.py): the point's one line, not a crash
        row["problem"] = "; ".join(point.get("problems") or [])[:300]
        table.append(row)
    return table


def update_report(sweep_dir: Path, point: str | None = None) -> dict[str, Any]:
    """After one point (named by `point`, its directory's name): the tables always, the
    figures when the last drawing is older than FIGURE_INTERVAL_S."""
    return write_report(sweep_dir, figures=None, point=point)


def write_report(
    sweep_dir: Path, figures: bool | None = True, point: str | None = None
) -> dict[str, Any]:
    """Rebuild the report files; returns counts and the best and worst points. `figures`
    None: draw them only if the last drawing is older than FIGURE_INTERVAL_S."""
    sweep_dir = Path(sweep_dir)
    index = PointIndex(sweep_dir)
    points = index.refresh(changed=point)
    if figures is None:
        figures = time.time() - (index.get("figures_at") or 0.0) >= FIGURE_INTERVAL_S
    keys = swept_keys(points)
    fam = for_points(points)
    table = rows(points, keys, fam)
    columns = ["point", *keys, "status", *fam.metrics, "wall_time_s", "seed", "error"]
    if any(row["slurm_job"] for row in table):
        columns += ["slurm_job", "slurm_log"]
    if any(row["problem"] for row in table):
        columns.append("problem")
    write_table(sweep_dir / "report.csv", columns, table)
    objective = fam.objective
    by_name = {row["point"]: row for row in table}
    ranked = [by_name[p["point"]] for p, _ in figs.scored(points, fam)]
    best, worst = (ranked[0], ranked[-1]) if ranked else (None, None)
    counts = dict(sorted(Counter(r["status"] for r in table).items()))
    # Seeds as replicates (report/seeds.py): one row per configuration of the other keys.
    seed_table: list[dict[str, Any]] = []
    config_keys = seeds.config_keys(keys)
    if seeds.varies_seed(points):
        seed_table = seeds.groups(points, config_keys, fam)
        write_table(sweep_dir / seeds.CSV, seeds.columns(config_keys, fam), seed_table)
    plots = [p.name for p in sorted(sweep_dir.glob("*.png"))]
    if figures:
        for stale in sweep_dir.glob("metric_vs_*.png"):  # the swept keys may have changed
            stale.unlink(missing_ok=True)  # another job's report writer may have removed it
        plots = figs.draw(sweep_dir, points, keys, fam) if points else []
        if seed_table:
            plots += seeds.draw(sweep_dir, points, seed_table, config_keys, fam)
        plots += _optuna_figures(sweep_dir)
        index.set("figures_at", time.time())
    index.save()
    with replacing(sweep_dir / "report.md") as temporary:
        temporary.write_text(
            _markdown(
                sweep_dir,
                columns,
                table,
                counts,
                ranked,
                plots,
                fam,
                seeds.markdown(seed_table, config_keys, fam) if seed_table else [],
                figs.pareto_points(points, fam),
            ),
            encoding="utf-8",
        )
    return {
        "objective": objective,
        "points": len(table),
        "counts": counts,
        "best": best,
        "worst": worst,
        "top": ranked[: figs.TOP_K],
        "failed": [r for r in table if r["status"] == "failed"],
        # stopped after a checkpoint and not requeued (e.g. launcher.max_requeues used up)
        "interrupted": [r for r in table if r["status"] == "interrupted"],
        "rows": table,
        "figures": plots,
        # seeds as replicates: one row per configuration, best mean first ([] without seeds)
        "seeds": seed_table,
        "seed_keys": config_keys,
        "pruned": [r for r in table if r["status"] == "pruned"],
        # a sweep still under way: its points not final yet (format_outcome counts the rest)
        "unfinished": [r for r in table if r["status"] not in DONE],
    }


def _optuna_figures(sweep_dir: Path) -> list[str]:
    """Optuna's own figures of a search whose study the sweep directory names."""
    if read_spec(sweep_dir) is None:
        return []
    from experiments.report.optuna_figures import write_optuna_figures

    return write_optuna_figures(sweep_dir)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def _markdown(
    sweep_dir: Path,
    columns: list[str],
    table: list[dict[str, Any]],
    counts: dict[str, int],
    ranked: list[dict[str, Any]],
    plots: list[str],
    fam: Family,
    seed_lines: list[str] | None = None,
    front: list[tuple[dict, float, float]] | None = None,
) -> str:
    objective = fam.objective
    lines = [
        f"# Sweep report: {sweep_dir}",
        "",
        ", ".join(f"{n} {status}" for status, n in counts.items()) or "no points yet",
        "",
        *(seed_lines or []),
    ]
    if seed_lines:
        lines += ["## Points", ""]
    if ranked:
        best, worst = ranked[0], ranked[-1]
        lines += [
            f"Best {objective}: {best[objective]:.4f} (point {best['point']}); worst: "
            f"{worst[objective]:.4f} (point {worst['point']}); margin "
            f"{abs(best[objective] - worst[objective]):.4f}"
            f" ({'higher' if fam.higher_is_better else 'lower'} is better).",
            "",
        ]
    if len(table) > figs.TOP_K and ranked:
        lines += [f"## Top {min(figs.TOP_K, len(ranked))} by {objective}", ""]
        lines += [*_table(columns, ranked[: figs.TOP_K]), "", "## All points", ""]
    lines += _table(columns, table)
    lines += _front(fam, front or [])
    lines += ["", *(f"![{name.removesuffix('.png')}]({name})" for name in plots)]
    return "\n".join(lines) + "\n"


def _front(fam: Family, front: list[tuple[dict, float, float]]) -> list[str]:
    """The Pareto front of the objective against the family's cost, as a table."""
    if fam.tradeoff is None or not front:
        return []
    cost = fam.tradeoff.cost
    lines = [
        "",
        f"## Pareto front: {fam.objective} vs {cost}",
        "",
        f"| point | {fam.objective} | {cost} |",
        "|---|---|---|",
    ]
    return lines + [f"| {p['point']} | {value:.4f} | {c:.4g} |" for p, c, value in front]


def _table(columns: list[str], table: list[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in table]


def format_run_outcome(sweep_dir: Path, outcome: dict[str, Any]) -> str:
    """A plain command that ran as a one-point sweep (launcher=slurm submits that way): its
    one run, not "point 0" of a sweep the user never asked for."""
    (row,) = outcome["rows"]
    run_dir = sweep_dir / row["point"]
    where = f"Slurm job {row['slurm_job']}" if row["slurm_job"] else "Run"
    lines = [f"{where} {row['status']}, {run_dir}"]
    value = row.get(outcome["objective"])
    if row["status"] == "completed" and isinstance(value, (int, float)):
        lines.append(f"  {outcome['objective']} {value:.4f}")
    if row["status"] == "failed":
        lines.append(f"  error: {row['error']}{_logs(row)}")
    if row["status"] == "interrupted":
        lines.append(f"  interrupted: {_resumes(row)}")
    return "\n".join(lines)


def _logs(row: dict[str, Any]) -> str:
    log = f" (log: {row['log']})" if row.get("log") else ""
    return log + (f" (Slurm log: {row['slurm_log']})" if row.get("slurm_log") else "")


def _resumes(row: dict[str, Any]) -> str:
    return f"{row['interrupted'] or 'stopped'}; the same command resumes it from its checkpoint"


def format_outcome(sweep_dir: Path, outcome: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in outcome["counts"].items())
    lines = [
        f"Sweep {sweep_dir}: {outcome['points']} points ({counts}); report: "
        f"{sweep_dir / 'report.md'}"
    ]
    if outcome["best"] is not None:
        objective = outcome["objective"]
        lines.append(
            f"  best {objective} {outcome['best'][objective]:.4f} at point "
            f"{outcome['best']['point']}"
        )
    best = (outcome.get("seeds") or [None])[0]
    if (
        best is not None
        and best[f"{outcome['objective']}_mean"] == best[f"{outcome['objective']}_mean"]
    ):  # not NaN: some seed completed
        objective = outcome["objective"]
        config = ", ".join(f"{k}={best[k]}" for k in outcome["seed_keys"]) or "all points"
        lines.append(
            f"  best configuration by mean {objective} over seeds: {config}: "
            f"{best[f'{objective}_mean']:.4f} ± {best[f'{objective}_std']:.4f} "
            f"({best['n_completed']} of {best['n']} seeds; report_seeds.csv)"
        )
    failed_seeds = sum(row["n_failed"] for row in outcome.get("seeds") or [])
    if failed_seeds:
        lines.append(f"  {failed_seeds} failed seed(s) counted in report_seeds.csv (n_failed)")
    unfinished = len(outcome.get("unfinished") or [])
    # read here, where the outcome is printed, not by every point's report update
    not_started = max((planned_points(sweep_dir) or 0) - outcome["points"], 0)
    if unfinished or not_started:
        lines.append(
            f"  still to come: {unfinished} point(s) running, {not_started} not started (queued "
            "or waiting for a slot); this report shows what has finished, and "
            "experiments-report <sweep dir> again shows the rest"
        )
    for row in outcome.get("pruned") or []:
        lines.append(f"  pruned point {row['point']} (stopped early by the search's pruner)")
    for row in outcome["rows"]:
        if row["slurm_job"]:
            lines.append(
                f"  point {row['point']}: Slurm job {row['slurm_job']} {row['status']}, "
                f"{sweep_dir / row['point']}"
            )
    for row in outcome["failed"]:
        lines.append(f"  FAILED point {row['point']}: {row['error']}{_logs(row)}")
    for row in outcome["interrupted"]:
        lines.append(f"  INTERRUPTED point {row['point']}: {_resumes(row)}")
    for row in outcome["rows"]:
        if row.get("problem"):
            lines.append(f"  PROBLEM point {row['point']}: {row['problem']}")
    return "\n".join(lines)


def format_run(run_dir: Path) -> str:
    """One run's record in a few lines: what ran, how it ended, its final metrics."""
    from experiments.run.record import read_records

    found = read_records(run_dir)
    summary = found["summary"]
    if summary is None:
        return f"Run {run_dir}: " + "; ".join(found["problems"])
    lines = [
        f"Run {run_dir}: {summary.get('status')} "
        f"({summary.get('model')} on {summary.get('data')}, {summary.get('topology')}, "
        f"{summary.get('launcher')}, world size {summary.get('world_size')})"
    ]
    if summary.get("error"):
        lines.append(f"  error         {summary['error']}")
    for key, value in (summary.get("metrics") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lines.append(
                f"  {key:<13} {value:.4f}" if isinstance(value, float) else f"  {key:<13} {value}"
            )
    if summary.get("wall_time_s") is not None:
        lines.append(f"  wall time     {summary['wall_time_s']:.1f} s")
    lines.append(f"  command       {summary.get('command')}")
    lines += [f"  problem       {problem}" for problem in found["problems"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = tool_cli.parser(
        "experiments-report",
        "Writes <sweep dir>/report.md, report.csv and figures from the sweep's run directories\n"
        "alone, and prints the best point; for one run's directory, prints its summary.",
        [
            "experiments-report outputs/multiruns/optimizer.lr_1e-3_3e-3-1a2b3c4d",
            "experiments-report outputs/runs/2026-12-06/10-00-00-000000   # one run",
            "experiments-report outputs/multiruns/<a search> --dashboard   # Optuna's dashboard",
        ],
        "a point of the sweep failed or was interrupted (the report is written all the same)",
    )
    parser.add_argument(
        "sweep_dir",
        metavar="SWEEP_DIR|RUN_DIR",
        type=Path,
        help="a multirun directory (holds 0/, 1/, ...), or one run's directory (summarised)",
    )
    parser.add_argument(
        "--dashboard",
        action="store_true",
        help="serve an Optuna search's study in optuna-dashboard (the `dashboard` extra) "
        "instead of writing the report",
    )
    parser.add_argument("--host", default="127.0.0.1", help="the dashboard's address")
    parser.add_argument(
        "--port", type=tool_cli.at_least(1), default=8080, help="the dashboard's port"
    )
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        parser.error(f"no such directory: {args.sweep_dir}")
    if args.dashboard:
        from experiments.errors import ConfigError
        from experiments.report import dashboard

        try:
            dashboard.serve(args.sweep_dir, args.host, args.port)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(ConfigError.exit_code)
        return
    if (args.sweep_dir / "summary.json").is_file():
        print(format_run(args.sweep_dir))  # one run: summarise it, write nothing into it
        return
    if not any(p.is_dir() and p.name.isdigit() for p in args.sweep_dir.iterdir()):
        parser.error(
            f"{args.sweep_dir} is neither a sweep directory (no 0/, 1/, ...) nor a run "
            "directory (no summary.json)"
        )
    outcome = write_report(args.sweep_dir)
    print(format_outcome(args.sweep_dir, outcome))
    sys.exit(1 if outcome["failed"] or outcome["interrupted"] else 0)


if __name__ == "__main__":
    main()
