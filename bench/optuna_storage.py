"""A pruned search's load (bench/study_load.py) on the journal file, the default storage, and
on SQLite, the storage before issue 59: N trial processes reporting at once while the login
asks and tells. Per storage and N: wall time, trials in the study against those expected,
reports lost or extra, trials left unfinished, storage calls tried again (the retries'
warnings in the workers' logs), trials that ran unpruned because their storage failed for
good, failed processes, and the login's error if it had one.

    .venv/bin/python -m bench.optuna_storage                  # N = 8, 16, 32 (a few minutes)
    .venv/bin/python -m bench.optuna_storage --workers 8      # one size

Both storages are files on this machine's local disk here: what NFS adds (fcntl locks that
some servers get wrong) cannot be reproduced on one machine, so SQLite's figures are its best
case. Results: bench/optuna_storage.json and a table on stdout (BENCHMARKS.md keeps them).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from bench.study_load import Load, as_dict, run

STORAGES = {
    "journal": lambda root: str(root / "optuna.journal"),
    "sqlite": lambda root: f"sqlite:///{root / 'optuna.db'}",
}
COLUMNS = (
    "seconds",
    "trials",
    "expected",
    "lost_reports",
    "extra_reports",
    "unfinished",
    "retried_calls",
    "retry_errors",
    "unpruned_trials",
    "worker_failures",
    "login_error",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, nargs="*", default=[8, 16, 32])
    parser.add_argument("--reports", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("optuna_storage.json"))
    args = parser.parse_args()
    rows = []
    for workers in args.workers:
        for name, storage in STORAGES.items():
            with tempfile.TemporaryDirectory() as scratch:
                root = Path(scratch)
                load = Load(storage=storage(root), workers=workers, rounds=2, reports=args.reports)
                outcome = as_dict(run(load, root))
            outcome["worker_failures"] = len(outcome["worker_failures"])
            rows.append({"storage": name, "workers": workers, **outcome})
            print(_line(rows[-1]), flush=True)
    header = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, "
        f"{__import__('os').cpu_count()} CPUs; {args.reports} reports a worker trial, 2 trials "
        "a worker slot, the login's own quick trials every 10 ms meanwhile"
    )
    args.out.write_text(json.dumps({"header": header, "rows": rows}, indent=2) + "\n")
    print(header)


def _line(row: dict) -> str:
    cells = ", ".join(f"{key} {row[key]}" for key in COLUMNS)
    return f"{row['storage']:>7} N={row['workers']:<3} {cells}"


if __name__ == "__main__":
    main()
