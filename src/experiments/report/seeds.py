"""Seeds as replicates (what the table and figures show: docs/sweeps.md): a sweep that varies
`seed` is a set of configurations, each run with several seeds; the paper's table is per
configuration. A failed seed is counted and shown (`n_failed`), never silently dropped, and a
configuration whose seeds all failed is listed last.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from experiments.families import Family
from experiments.report.points import curve as read_curve
from experiments.report.points import save_png

SEED = "seed"
CSV = "report_seeds.csv"
ERROR_BARS = "seeds_objective.png"
CURVES = "seeds_learning_curves.png"
CONFIDENCE = 0.95


def varies_seed(points: list[dict[str, Any]]) -> bool:
    return len({p["overrides"].get(SEED) for p in points}) > 1


def config_keys(keys: list[str]) -> list[str]:
    """The swept keys that make a configuration: all but the seed."""
    return [k for k in keys if k != SEED]


def t_interval(values: list[float]) -> tuple[float, float, float, float]:
    """(mean, sample std, low, high) of a 95 % Student-t interval for the mean; std and the
    interval are NaN for a single value (one seed says nothing about the spread)."""
    if not values:
        return (math.nan,) * 4  # type: ignore[return-value]
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan, math.nan
    std = statistics.stdev(values)
    from scipy.stats import t

    half = float(t.ppf((1 + CONFIDENCE) / 2, len(values) - 1)) * std / math.sqrt(len(values))
    return mean, std, mean - half, mean + half


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def groups(points: list[dict[str, Any]], keys: list[str], fam: Family) -> list[dict[str, Any]]:
    """One row per configuration, ranked by the objective's mean (best first; those with no
    completed seed last)."""
    by_config: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for point in points:
        config = tuple(str(point["overrides"].get(k, "")) for k in keys)
        by_config.setdefault(config, []).append(point)
    table = []
    for config, members in by_config.items():
        completed = [p for p in members if p["summary"].get("status") == "completed"]
        row: dict[str, Any] = dict(zip(keys, config, strict=True))
        row.update(
            n=len(members),
            n_completed=len(completed),
            n_failed=sum(p["summary"].get("status") == "failed" for p in members),
            seeds=" ".join(str(p["overrides"].get(SEED, "")) for p in members),
            failed_seeds=" ".join(
                str(p["overrides"].get(SEED, ""))
                for p in members
                if p["summary"].get("status") == "failed"
            ),
            points=" ".join(p["point"] for p in members),
        )
        for metric in fam.metrics:
            values = [
                v
                for p in completed
                if (v := _number((p["summary"].get("metrics") or {}).get(metric))) is not None
            ]
            mean, std, low, high = t_interval(values)
            row.update(
                {
                    f"{metric}_mean": mean,
                    f"{metric}_std": std,
                    f"{metric}_ci95_low": low,
                    f"{metric}_ci95_high": high,
                }
            )
        table.append(row)
    objective = f"{fam.objective}_mean"

    def order(row: dict[str, Any]) -> tuple[bool, float]:
        value = row[objective]
        return (math.isnan(value), 0.0 if math.isnan(value) else fam.rank_key(value))

    return sorted(table, key=order)


def columns(keys: list[str], fam: Family) -> list[str]:
    stats = [f"{m}_{s}" for m in fam.metrics for s in ("mean", "std", "ci95_low", "ci95_high")]
    return [*keys, "n", "n_completed", "n_failed", *stats, "seeds", "failed_seeds", "points"]


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4g}"


def markdown(table: list[dict[str, Any]], keys: list[str], fam: Family) -> list[str]:
    """The table at the top of report.md: one line per configuration, ranked by the mean."""
    objective = fam.objective
    direction = "higher" if fam.higher_is_better else "lower"
    lines = [
        f"## Seeds as replicates: {objective} over seeds, ranked by mean ({direction} is better)",
        "",
    ]
    if table and not math.isnan(table[0][f"{objective}_mean"]):
        best = table[0]
        config = ", ".join(f"{k}={best[k]}" for k in keys) or "(the one configuration)"
        lines += [
            f"Best configuration by mean {objective}: {config}: "
            f"{_fmt(best[f'{objective}_mean'])} ± {_fmt(best[f'{objective}_std'])} (std), "
            f"95 % CI [{_fmt(best[f'{objective}_ci95_low'])}, "
            f"{_fmt(best[f'{objective}_ci95_high'])}] over {best['n_completed']} seeds.",
            "",
        ]
    header = [*keys, "n", "completed", "failed", f"{objective} mean", "std", "95 % CI", "seeds"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table:
        failed = str(row["n_failed"])
        if row["failed_seeds"]:
            failed += f" (seed {row['failed_seeds']})"
        cells = [
            *(str(row[k]).replace("|", "\\|") for k in keys),
            str(row["n"]),
            str(row["n_completed"]),
            failed,
            _fmt(row[f"{objective}_mean"]),
            _fmt(row[f"{objective}_std"]),
            f"[{_fmt(row[f'{objective}_ci95_low'])}, {_fmt(row[f'{objective}_ci95_high'])}]",
            row["seeds"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _label(row: dict[str, Any], keys: list[str]) -> str:
    from experiments.report.figures import short

    text = ", ".join(f"{k.rsplit('.', 1)[-1]}={short(str(row[k]))}" for k in keys)
    return text or "all"


def draw(
    sweep_dir: Path,
    points: list[dict[str, Any]],
    table: list[dict[str, Any]],
    keys: list[str],
    fam: Family,
) -> list[str]:
    """The objective per configuration with 95 % intervals as error bars (failed seeds in the
    tick labels), and the learning curves as mean ± std bands per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    by_name = {p["point"]: p for p in points}
    _draw_objective(Path(sweep_dir) / ERROR_BARS, by_name, table, keys, fam)
    _draw_curves(Path(sweep_dir) / CURVES, by_name, table, keys, fam)
    return [ERROR_BARS, CURVES]


def _draw_objective(
    path: Path,
    by_name: dict[str, dict[str, Any]],
    table: list[dict[str, Any]],
    keys: list[str],
    fam: Family,
) -> None:
    """Each configuration's mean and 95 % interval, its completed seeds' values as dots, and
    how many seeds completed and failed in its tick label."""
    import matplotlib.pyplot as plt

    objective = fam.objective
    figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    positions = range(len(table))
    means = [row[f"{objective}_mean"] for row in table]
    low = [m - row[f"{objective}_ci95_low"] for m, row in zip(means, table, strict=True)]
    high = [row[f"{objective}_ci95_high"] - m for m, row in zip(means, table, strict=True)]
    errors = [
        [0.0 if math.isnan(v) else v for v in low],
        [0.0 if math.isnan(v) else v for v in high],
    ]
    axis.errorbar(
        positions,
        means,
        yerr=errors,
        fmt="o",
        capsize=5,
        color="tab:blue",
        label="mean, 95 % t-interval",
    )
    for index, row in enumerate(table):
        values = [
            v
            for name in row["points"].split()
            if by_name[name]["summary"].get("status") == "completed"
            and (v := _number((by_name[name]["summary"].get("metrics") or {}).get(objective)))
            is not None
        ]
        axis.scatter([index] * len(values), values, s=12, color="0.4", zorder=3)
    ticks = []
    for row in table:
        tick = f"{_label(row, keys)}\n{row['n_completed']}/{row['n']} seeds"
        if row["n_failed"]:
            tick += f", {row['n_failed']} failed"
        ticks.append(tick)
    axis.set_xticks(list(positions), ticks, fontsize=7, rotation=15 if len(table) > 4 else 0)
    axis.set_ylabel(objective)
    axis.set_title(f"{objective} per configuration over seeds (best first)", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_png(figure, path)


def _draw_curves(
    path: Path,
    by_name: dict[str, dict[str, Any]],
    table: list[dict[str, Any]],
    keys: list[str],
    fam: Family,
) -> None:
    """One panel per learning curve of the family, one band per configuration."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for axis, panel in zip(axes, fam.curves, strict=True):
        for row in table:
            _draw_band(
                axis, panel, [by_name[name] for name in row["points"].split()], _label(row, keys)
            )
        axis.set(xlabel=panel.xlabel, ylabel=panel.title.lower())
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(f"{panel.title}: mean ± std over seeds", fontsize=10)
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    save_png(figure, path)


def _draw_band(axis: Any, panel: Any, members: list[dict[str, Any]], label: str) -> None:
    """One configuration's curve: the mean over its seeds at each x, ± their std (an error
    bar where there is one x only). Nothing for a configuration none of whose seeds logged."""
    series = []
    for point in members:
        data = read_curve(point["run_dir"], panel.log)
        xs, ys = data.get(panel.x) or [], data.get(panel.y) or []
        series.append(
            {x: y for x, y in zip(xs, ys, strict=False) if x is not None and y is not None}
        )
    series = [s for s in series if s]  # a seed that failed before logging has none
    xs = sorted({x for s in series for x in s})
    if not xs:
        return
    mean, spread = [], []
    for x in xs:
        at = [s[x] for s in series if x in s and _number(s[x]) is not None]
        mean.append(statistics.fmean(at) if at else math.nan)
        spread.append(statistics.stdev(at) if len(at) > 1 else 0.0)
    (line,) = axis.plot(
        xs, mean, marker="o" if len(xs) <= 20 else None, label=f"{label} (n={len(series)})"
    )
    if len(xs) == 1:  # one evaluation: a band has no width, an error bar does
        axis.errorbar(xs, mean, yerr=spread, capsize=5, color=line.get_color())
    axis.fill_between(
        xs,
        [m - s for m, s in zip(mean, spread, strict=True)],
        [m + s for m, s in zip(mean, spread, strict=True)],
        color=line.get_color(),
        alpha=0.2,
    )
