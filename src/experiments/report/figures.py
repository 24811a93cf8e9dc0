"""The report's figures, readable at any sweep size.

One figure per swept key: a continuous numeric key (many distinct values, e.g. a sampled
learning rate) is a scatter, on a log axis where its values span decades; a categorical or
grid key (few values) is a box per value with the points over it. The learning curves label
the top points only; the rest are drawn faint and unlabelled, so a 1000-point sweep is a cloud
with its best runs on top, not a 1000-entry legend. The best points are starred everywhere.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from experiments.families import Family
from experiments.report.points import curve as read_curve
from experiments.report.points import save_png

TOP_K = 5  # points labelled in the curves and starred in the scatters
CONTINUOUS_MIN_VALUES = 9  # a numeric key with at least this many distinct values: scatter


def number(value: Any) -> float | None:
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(result) else result


def scored(points: list[dict[str, Any]], fam: Family) -> list[tuple[dict[str, Any], float]]:
    """Completed points with an objective value, best first."""
    found = []
    for point in points:
        if point["summary"].get("status") != "completed":
            continue
        value = number((point["summary"].get("metrics") or {}).get(fam.objective))
        if value is not None:
            found.append((point, value))
    return sorted(found, key=lambda item: fam.rank_key(item[1]))


def draw(sweep_dir: Path, points: list[dict[str, Any]], keys: list[str], fam: Family) -> list[str]:
    """Write every figure; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = scored(points, fam)
    written: list[str] = []
    for key in keys if len(points) > 1 else []:  # a value vs. metric needs two points
        figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        _key_panel(axis, key, ranked, fam)
        written.append(f"metric_vs_{filename(key)}.png")
        save_png(figure, sweep_dir / written[-1])
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    _curves(axes, points, keys, ranked, fam)
    save_png(figure, sweep_dir / "learning_curves.png")
    written.append("learning_curves.png")
    if fam.tradeoff is not None and pareto_points(points, fam):
        written.append(_draw_tradeoff(sweep_dir, points, keys, fam))
    return written


def tradeoff_points(points: list[dict[str, Any]], fam: Family) -> list[tuple[dict, float, float]]:
    """(point, cost, objective) of every completed point that measured both."""
    found = []
    assert fam.tradeoff is not None
    for point in points:
        metrics = point["summary"].get("metrics") or {}
        cost, value = number(metrics.get(fam.tradeoff.cost)), number(metrics.get(fam.objective))
        if point["summary"].get("status") == "completed" and cost is not None and value is not None:
            found.append((point, cost, value))
    return found


def pareto_points(points: list[dict[str, Any]], fam: Family) -> list[tuple[dict, float, float]]:
    """The points no other point beats on both the cost (lower) and the objective: cheapest
    first, each better on the objective than every cheaper one."""
    if fam.tradeoff is None:
        return []
    front: list[tuple[dict, float, float]] = []
    cheapest_first = sorted(tradeoff_points(points, fam), key=lambda i: (i[1], fam.rank_key(i[2])))
    for point, cost, value in cheapest_first:
        if not front or fam.rank_key(value) < fam.rank_key(front[-1][2]):
            front.append((point, cost, value))
    return front


def _draw_tradeoff(sweep_dir: Path, points: list[dict[str, Any]], keys: list[str], fam: Family):
    import matplotlib.pyplot as plt

    assert fam.tradeoff is not None
    every, front = tradeoff_points(points, fam), pareto_points(points, fam)
    figure, axis = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    axis.scatter(
        [c for _, c, _ in every],
        [v for _, _, v in every],
        s=18,
        color="0.55",
        label="point",
        zorder=2,
    )
    axis.plot(
        [c for _, c, _ in front],
        [v for _, _, v in front],
        "-o",
        color="C3",
        markersize=6,
        label="Pareto front",
        zorder=3,
    )
    for point, cost, value in front:
        axis.annotate(
            label(point, keys) or point["point"],
            (cost, value),
            fontsize=7,
            textcoords="offset points",
            xytext=(4, 4),
        )
    axis.set_xlabel(fam.tradeoff.label)
    axis.set_ylabel(fam.objective)
    axis.set_title(
        f"{fam.objective} vs {fam.tradeoff.cost}: {len(every)} points, {len(front)} on the front",
        fontsize=9,
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_png(figure, sweep_dir / fam.tradeoff.filename)
    return fam.tradeoff.filename


def _key_panel(axis: Any, key: str, ranked: list[tuple[dict, float]], fam: Family) -> None:
    values = [(p["overrides"].get(key, ""), score) for p, score in ranked]
    top = values[:TOP_K]
    numeric = bool(values) and all(number(v) is not None for v, _ in values)
    distinct = {v for v, _ in values}
    if numeric and len(distinct) >= CONTINUOUS_MIN_VALUES:
        xs = [float(v) for v, _ in values]
        axis.scatter(
            xs,
            [s for _, s in values],
            s=14 if len(xs) > 200 else 24,
            alpha=max(0.2, min(0.8, 40 / len(xs))),
            color="tab:blue",
            label=f"{len(xs)} completed points",
        )
        if min(xs) > 0 and max(xs) / min(xs) >= 10:
            axis.set_xscale("log")
        positions = [float(v) for v, _ in top]
    else:
        order = sorted(distinct, key=float) if numeric else sorted(distinct)
        where = {value: index for index, value in enumerate(order)}
        groups = [[s for v, s in values if v == value] for value in order]
        axis.boxplot(groups, positions=range(len(order)), widths=0.5, showfliers=False)
        jitter = random.Random(0)
        axis.scatter(
            [where[v] + jitter.uniform(-0.15, 0.15) for v, _ in values],
            [s for _, s in values],
            s=10,
            alpha=max(0.15, min(0.7, 40 / max(1, len(values)))),
            color="tab:blue",
            label=f"{len(values)} completed points",
        )
        axis.set_xticks(
            range(len(order)),
            [short(v) for v in order],
            rotation=90 if len(order) > 12 else 15,
            ha="center" if len(order) > 12 else "right",
        )
        positions = [where[v] for v, _ in top]
    if top:
        axis.scatter(
            positions,
            [s for _, s in top],
            marker="*",
            s=140,
            color="tab:red",
            edgecolors="black",
            linewidths=0.5,
            zorder=3,
            label=f"top {len(top)}",
        )
        best_point, best_score = ranked[0]
        axis.annotate(
            f"best: point {best_point['point']}",
            (positions[0], best_score),
            fontsize=8,
            xytext=(6, -12),
            textcoords="offset points",
        )
        axis.legend(fontsize=8)
    axis.set_xlabel(key)
    axis.set_ylabel(fam.objective)
    axis.set_title(f"{fam.objective} vs {key} ({len(values)} completed points)")
    axis.grid(alpha=0.3)


def _curves(
    axes: Any,
    points: list[dict[str, Any]],
    keys: list[str],
    ranked: list[tuple[dict, float]],
    fam: Family,
) -> None:
    from matplotlib.collections import LineCollection
    from matplotlib.ticker import MaxNLocator

    if len(points) <= TOP_K:
        labelled = [p["point"] for p in points]
    else:
        labelled = [p["point"] for p, _ in ranked[:TOP_K]]
    by_name = {p["point"]: p for p in points}
    logs: dict[tuple[str, str], dict] = {}  # each log read once for both panels
    for axis, curve in zip(axes, fam.curves, strict=True):
        faint = []
        for point in points:
            if point["point"] not in labelled:
                pairs = _pairs(point, curve, logs)
                if pairs:
                    faint.append(pairs)
        if faint:
            axis.add_collection(
                LineCollection(
                    faint,
                    colors="0.55",
                    alpha=max(0.08, min(0.5, 20 / len(faint))),
                    linewidths=0.8,
                    zorder=1,
                )
            )
        for name in labelled:
            pairs = _pairs(by_name[name], curve, logs)
            if pairs:
                axis.plot(
                    [x for x, _ in pairs],
                    [y for _, y in pairs],
                    marker="o" if len(pairs) <= 20 else None,
                    label=label(by_name[name], keys),
                    zorder=3,
                )
        axis.autoscale_view()
        title = curve.title
        if faint:
            title += f" (top {len(labelled)} of {len(points)} by {fam.objective}; rest grey)"
        axis.set(xlabel=curve.xlabel, ylabel=curve.title.lower())
        axis.set_title(title, fontsize=10)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)


def _pairs(point: dict[str, Any], panel: Any, logs: dict) -> list[tuple[float, float]]:
    key = (point["point"], panel.log)
    if key not in logs:
        logs[key] = read_curve(point["run_dir"], panel.log)
    series = logs[key]
    xs, ys = series.get(panel.x) or [], series.get(panel.y) or []
    return [(x, y) for x, y in zip(xs, ys, strict=False) if x is not None and y is not None]


def short(value: str) -> str:
    """A path shows as its last component; other values as they are."""
    return Path(value).name or value if "/" in value else value


def label(point: dict[str, Any], keys: list[str]) -> str:
    text = ", ".join(
        f"{key.rsplit('.', 1)[-1]}={short(point['overrides'].get(key, ''))}" for key in keys
    )
    return f"{point['point']}: {text}" if text and len(text) <= 48 else f"point {point['point']}"


def filename(key: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in key)
