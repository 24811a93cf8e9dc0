"""Sweep report: a table and plots built from the run directories alone.

`experiments-report <sweep dir>` rebuilds it at any time (also for Slurm sweeps whose jobs end
hours apart); the sweep callbacks rebuild it after every point. Writes report.csv, report.md,
metric_vs_<key>.png (one per swept key) and learning_curves.png into the sweep directory.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Curve:
    """One learning-curve panel: `y` against `x` from one of a run's JSON-lines logs."""

    log: str
    x: str
    y: str
    xlabel: str
    title: str


@dataclass(frozen=True)
class Family:
    """What a report shows for a model family: its columns, objective and curves."""

    metrics: tuple[str, ...]
    objective: str
    higher_is_better: bool
    curves: tuple[Curve, Curve]

    def best(self, values: list[float]) -> float:
        return max(values) if self.higher_is_better else min(values)


SNN = Family(
    ("val_accuracy", "val_loss", "train_loss", "images_per_second", "steps"),
    "val_accuracy",
    True,
    (
        Curve("metrics.jsonl", "epoch", "val_accuracy", "epoch", "Validation accuracy"),
        Curve("steps.jsonl", "step", "loss", "optimizer step", "Training loss"),
    ),
)
GAN = Family(  # MMGen runs: SWD to the data (lower is better), the two networks' losses
    ("swd", "ms_ssim", "loss_gen", "loss_disc", "images_per_second", "steps"),
    "swd",
    False,
    (
        Curve("metrics.jsonl", "step", "loss_gen", "iteration", "Generator loss"),
        Curve("metrics.jsonl", "step", "loss_disc", "iteration", "Discriminator loss"),
    ),
)


def family(points: list[dict[str, Any]]) -> Family:
    engines = {p["summary"].get("engine") for p in points}
    return GAN if engines == {"mmgen"} else SNN


def load_points(sweep_dir: Path) -> list[dict[str, Any]]:
    points = []
    for summary_path in sorted(sweep_dir.glob("*/summary.json"), key=_point_order):
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        run_dir = summary_path.parent
        overrides = summary.get("overrides") or _hydra_overrides(run_dir)
        points.append(
            {
                "point": run_dir.name,
                "run_dir": run_dir,
                "summary": summary,
                "overrides": dict(_split(o) for o in overrides if "=" in o),
            }
        )
    return points


def _point_order(path: Path) -> tuple[int, str]:
    name = path.parent.name
    return (int(name), name) if name.isdigit() else (sys.maxsize, name)


def _hydra_overrides(run_dir: Path) -> list[str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return []
    import yaml

    return list(yaml.safe_load(path.read_text(encoding="utf-8")) or [])


def _split(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def swept_keys(points: list[dict[str, Any]]) -> list[str]:
    """Keys whose value differs between points (all of them for a single point)."""
    keys: list[str] = []
    for point in points:
        keys += [k for k in point["overrides"] if k not in keys and not k.startswith("hydra.")]
    if len(points) < 2:
        return keys
    return [k for k in keys if len({p["overrides"].get(k) for p in points}) > 1]


def rows(points: list[dict[str, Any]], keys: list[str], fam: Family = SNN) -> list[dict[str, Any]]:
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
        row["slurm_log"] = slurm.get("stderr", "") if row["status"] == "failed" else ""
        row["seed"] = summary.get("seed", "")
        row["error"] = (
            (summary.get("error") or "").splitlines()[0][:160] if summary.get("error") else ""
        )
        table.append(row)
    return table


def write_report(sweep_dir: Path) -> dict[str, Any]:
    """Rebuild every report file; returns counts and the best and worst points."""
    sweep_dir = Path(sweep_dir)
    points = load_points(sweep_dir)
    keys = swept_keys(points)
    fam = family(points)
    table = rows(points, keys, fam)
    columns = ["point", *keys, "status", *fam.metrics, "wall_time_s", "seed", "error"]
    if any(row["slurm_job"] for row in table):
        columns += ["slurm_job", "slurm_log"]
    with open(sweep_dir / "report.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(table)
    objective = fam.objective
    scored = [r for r in table if r["status"] == "completed" and _number(r[objective]) is not None]
    sign = 1 if fam.higher_is_better else -1
    best = max(scored, key=lambda r: sign * r[objective], default=None)
    worst = min(scored, key=lambda r: sign * r[objective], default=None)
    counts = {
        status: sum(r["status"] == status for r in table)
        for status in sorted({r["status"] for r in table})
    }
    for stale in sweep_dir.glob("metric_vs_*.png"):  # the swept keys may have changed
        stale.unlink(missing_ok=True)  # another job's report writer may have removed it
    plots = _plots(sweep_dir, points, keys, fam) if points else []
    (sweep_dir / "report.md").write_text(
        _markdown(sweep_dir, columns, table, counts, best, worst, plots, fam), encoding="utf-8"
    )
    return {
        "objective": objective,
        "points": len(table),
        "counts": counts,
        "best": best,
        "worst": worst,
        "failed": [r for r in table if r["status"] == "failed"],
        "rows": table,
    }


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def _markdown(
    sweep_dir: Path,
    columns: list[str],
    table: list[dict[str, Any]],
    counts: dict[str, int],
    best: dict | None,
    worst: dict | None,
    plots: list[str],
    fam: Family = SNN,
) -> str:
    objective = fam.objective
    lines = [
        f"# Sweep report: {sweep_dir}",
        "",
        ", ".join(f"{n} {status}" for status, n in counts.items()) or "no points yet",
        "",
    ]
    if best is not None and worst is not None:
        lines += [
            f"Best {objective}: {best[objective]:.4f} (point {best['point']}); worst: "
            f"{worst[objective]:.4f} (point {worst['point']}); margin "
            f"{abs(best[objective] - worst[objective]):.4f}"
            f" ({'higher' if fam.higher_is_better else 'lower'} is better).",
            "",
        ]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in table]
    lines += ["", *(f"![{name.removesuffix('.png')}]({name})" for name in plots)]
    return "\n".join(lines) + "\n"


def _short(value: str) -> str:
    """A path shows as its last component; other values as they are."""
    return Path(value).name or value if "/" in value else value


def _label(point: dict[str, Any], keys: list[str]) -> str:
    label = ", ".join(
        f"{key.rsplit('.', 1)[-1]}={_short(point['overrides'].get(key, ''))}" for key in keys
    )
    return f"{point['point']}: {label}" if label and len(label) <= 48 else f"point {point['point']}"


def _plots(
    sweep_dir: Path, points: list[dict[str, Any]], keys: list[str], fam: Family
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    written: list[str] = []
    done = [p for p in points if p["summary"].get("status") == "completed"]
    for key in keys if len(points) > 1 else []:  # a value vs. metric needs two points
        groups: dict[str, list[float]] = {}
        for point in done:
            metric = _number((point["summary"].get("metrics") or {}).get(fam.objective))
            if metric is not None:
                groups.setdefault(point["overrides"].get(key, ""), []).append(metric)
        figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        if groups and all(_number(v) is not None for v in groups):
            values = sorted(groups, key=float)
            xs = [float(v) for v in values]
            for x, value in zip(xs, values, strict=True):
                axis.scatter([x] * len(groups[value]), groups[value], color="tab:blue", alpha=0.5)
            axis.plot(
                xs,
                [fam.best(groups[v]) for v in values],
                marker="o",
                color="tab:blue",
                label="best at this value",
            )
            if min(xs) > 0 and max(xs) / min(xs) >= 10:
                axis.set_xscale("log")
        elif groups:
            values = list(groups)
            axis.bar(
                range(len(values)),
                [fam.best(groups[v]) for v in values],
                alpha=0.35,
                label="best at this value",
            )
            for index, value in enumerate(values):
                axis.scatter([index] * len(groups[value]), groups[value], color="tab:blue")
            axis.set_xticks(
                range(len(values)), [_short(v) for v in values], rotation=15, ha="right"
            )
        if groups:
            axis.legend(fontsize=8)
        axis.set_xlabel(key)
        axis.set_ylabel(fam.objective)
        count = sum(len(g) for g in groups.values())
        axis.set_title(f"{fam.objective} vs {key} ({count} completed points)")
        axis.grid(alpha=0.3)
        figure.tight_layout()
        written.append(f"metric_vs_{_filename(key)}.png")
        figure.savefig(sweep_dir / written[-1])
        plt.close(figure)

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for axis, curve in zip(axes, fam.curves, strict=True):
        for point in points:
            records = [r for r in _jsonl(point["run_dir"] / curve.log) if curve.y in r]
            if records:
                axis.plot(
                    [r[curve.x] for r in records],
                    [r[curve.y] for r in records],
                    marker="o" if len(records) <= 20 else None,
                    label=_label(point, keys),
                )
        axis.set(xlabel=curve.xlabel, ylabel=curve.title.lower(), title=curve.title)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(sweep_dir / "learning_curves.png")
    plt.close(figure)
    return [*written, "learning_curves.png"]


def _filename(key: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in key)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


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
    for row in outcome["rows"]:
        if row["slurm_job"]:
            lines.append(
                f"  point {row['point']}: Slurm job {row['slurm_job']} {row['status']}, "
                f"{sweep_dir / row['point']}"
            )
    for row in outcome["failed"]:
        log = f" (Slurm log: {row['slurm_log']})" if row.get("slurm_log") else ""
        lines.append(f"  FAILED point {row['point']}: {row['error']}{log}")
    return "\n".join(lines)


def format_run(run_dir: Path) -> str:
    """One run's record in a few lines: what ran, how it ended, its final metrics."""
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="experiments-report", description=__doc__)
    parser.add_argument(
        "sweep_dir",
        type=Path,
        help="a multirun directory (holds 0/, 1/, ...), or one run's directory (summarised)",
    )
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        parser.error(f"no such directory: {args.sweep_dir}")
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
    sys.exit(1 if outcome["failed"] else 0)


if __name__ == "__main__":
    main()
