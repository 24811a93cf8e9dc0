"""Run every benchmark and write the results table (bench/results.md, bench/results.json)
and the figures section of BENCHMARKS.md.

    .venv/bin/python -m bench.run_all            # full sizes (7-16 min on 2 cores)
    .venv/bin/python -m bench.run_all --quick    # tiny sizes: checks the scripts run
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from bench import gan_overhead, input_pipeline, snn_overhead, startup, sweep_scale, topology_cost
from bench.common import REPO

START, END = "<!-- results:start -->", "<!-- results:end -->"


def table(rows: list[dict]) -> str:
    lines = ["| benchmark | measure | value | target | met | notes |", "|---|---|---|---|---|---|"]
    for r in rows:
        met = "" if r["ok"] is None else ("yes" if r["ok"] else "NO")
        lines.append(
            f"| {r['benchmark']} | {r['measure']} | {r['value']} | {r['target']} | "
            f"{met} | {r['notes']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, one run per arm, the fewest steps that time one gap, the sweep report "
        "at 1000 points only, no sweeps: checks that every script runs and writes its row "
        "(what tests/test_bench.py runs); its figures are not measurements",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench")
    args = parser.parse_args()
    started = time.time()
    # --quick: the smallest sizes at which every row is still measured (the test suite runs it).
    rows = [
        *snn_overhead.measure(
            steps=None if args.quick else 60, repeats=1 if args.quick else 3, quick=args.quick
        ),
        *gan_overhead.measure(
            iters=6 if args.quick else 200,
            log_every=1 if args.quick else 10,
            repeats=1 if args.quick else 3,
        ),
        *startup.measure(repeats=1 if args.quick else 5),
        *topology_cost.measure(steps=30, profile_steps=1 if args.quick else 5, quick=args.quick),
        *sweep_scale.measure(quick=args.quick),
        *input_pipeline.measure_rows(quick=args.quick),
    ]
    header = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, "
        f"{__import__('os').cpu_count()} CPUs, {'quick' if args.quick else 'full'} sizes, "
        f"{time.time() - started:.0f} s."
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"header": header, "rows": rows}, indent=2))
    (args.out / "results.md").write_text(f"{header}\n\n{table(rows)}\n")
    if not args.quick:
        doc = REPO / "BENCHMARKS.md"
        text = doc.read_text()
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        doc.write_text(f"{head}{START}\n{header}\n\n{table(rows)}\n{END}{tail}")
    print(f"{header}\n\n{table(rows)}")


if __name__ == "__main__":
    main()
