"""`make mutants`: make every kept breakage again and show that its test still catches it.

Each `[[mutant]]` of tests/mutants/*.toml (format: tests/mutants/README.md) is applied in a
scratch copy of the working tree (tracked and untracked-not-ignored files, so uncommitted
edits count), never in the tree itself. The copy's `src/` is what every process imports
(PYTHONPATH), so the console scripts, torchrun ranks and Slurm jobs the tests start run the
broken code too; the installed package in .venv is never touched. One line per mutant:

    caught    12.3 s  <name>
    SURVIVED  40.1 s  <name>   (its tests passed with the breakage in place)
    ERROR      0.0 s  <name>   (the mutant cannot be applied, or pytest could not run its tests)

then a summary; the exit status is non-zero when any mutant survived or erred.

Usage: `make mutants [MUTANTS=<filter>]` or `.venv/bin/python scripts/mutants.py [filter]
[--list] [--check] [--keep] [--timeout S] [--clean-first]`. `--check` only checks that
each mutant applies (its `replace` text occurs once), in a second. The filter is a
case-insensitive substring of a mutant's name or of its file's name (`MUTANTS=gan` runs
gan.toml and every mutant whose name says GAN). `--clean-first` runs each mutant's tests
once on the unbroken copy first, so that a test failing for another reason is not counted
as a catch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTANTS_DIR = REPO / "tests" / "mutants"
PYTHON = REPO / ".venv" / "bin" / "python"
REQUIRED = ("name", "file", "replace", "with", "test")


@dataclass
class Mutant:
    name: str
    file: str
    replace: str
    with_: str
    tests: list[str]
    source: str  # the .toml file it comes from

    def matches(self, text: str) -> bool:
        text = text.lower()
        return text in self.name.lower() or text in self.source.lower()


def load(directory: Path = MUTANTS_DIR) -> tuple[list[Mutant], list[str]]:
    """Every mutant of every .toml file, and the problems found in reading them (a missing
    key, a file that does not exist, a `replace` text that does not occur exactly once)."""
    mutants: list[Mutant] = []
    problems: list[str] = []
    for path in sorted(directory.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as error:
            problems.append(f"{path.name}: not valid TOML: {error}")
            continue
        for index, entry in enumerate(data.get("mutant", []), start=1):
            where = f"{path.name} mutant {index} ({entry.get('name', 'unnamed')!r})"
            missing = [key for key in REQUIRED if key not in entry]
            if missing:
                problems.append(f"{where}: missing {', '.join(missing)}")
                continue
            tests = entry["test"] if isinstance(entry["test"], list) else [entry["test"]]
            mutants.append(
                Mutant(
                    entry["name"], entry["file"], entry["replace"], entry["with"], tests, path.name
                )
            )
    return mutants, problems


def applicable(mutant: Mutant, tree: Path) -> str | None:
    """Why the mutant cannot be applied to `tree`, or None when it can."""
    target = tree / mutant.file
    if not target.is_file():
        return f"{mutant.file} does not exist"
    if mutant.replace == mutant.with_:
        return "`replace` and `with` are the same text"
    count = target.read_text().count(mutant.replace)
    if count != 1:
        return f"`replace` occurs {count} times in {mutant.file} (it must occur exactly once)"
    for test in mutant.tests:
        test_file = tree / test.split("::", 1)[0]
        if not test_file.exists():
            return f"test file {test_file.relative_to(tree)} does not exist"
    return None


def working_tree_files() -> list[str]:
    """Tracked files and untracked files git does not ignore (deleted tracked files left out)."""
    listing = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({name for name in listing.split("\0") if name and (REPO / name).is_file()})


def copy_tree(files: list[str], destination: Path) -> None:
    """The working tree as the tests need it: its files, and src/experiments/conf -> conf/
    (the dev tree's gitignored symlink, through which the package finds its configs)."""
    for name in files:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target, follow_symlinks=False)
    conf_link = destination / "src" / "experiments" / "conf"
    if not conf_link.exists() and (destination / "conf").is_dir():
        conf_link.symlink_to(Path("..", "..", "conf"))


def run_tests(tests: list[str], tree: Path, timeout: float, log: Path) -> tuple[int | None, float]:
    """pytest on `tests` in the copy, importing the copy's package; (returncode or None on
    timeout, seconds)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(tree / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    command = [str(PYTHON), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    with log.open("w") as out:
        out.write(f"$ PYTHONPATH={env['PYTHONPATH']} {' '.join(command)}\n")
        out.flush()
        proc = subprocess.Popen(
            command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            returncode = None
    return returncode, time.monotonic() - start


def outcome(returncode: int | None) -> str:
    """pytest exits 1 when a test failed (caught), 0 when all passed (survived); anything else
    (interrupted, a collection error, no test found) says nothing about the mutant."""
    if returncode == 1:
        return "caught"
    if returncode == 0:
        return "SURVIVED"
    return "TIMEOUT" if returncode is None else f"ERROR(pytest exit {returncode})"


def tail(path: Path, lines: int = 15) -> str:
    return "\n".join("    " + line for line in path.read_text().splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("filter", nargs="?", default=os.environ.get("MUTANTS", ""))
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check that each mutant applies to the working tree (no test is run)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies and logs")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per mutant")
    parser.add_argument(
        "--clean-first",
        action="store_true",
        help="run each mutant's tests on the unbroken copy first (a failure there is an error)",
    )
    args = parser.parse_args(argv)

    mutants, problems = load()
    selected = [m for m in mutants if not args.filter or m.matches(args.filter)]
    for problem in problems:
        print(f"ERROR     {problem}")
    if args.list:
        for mutant in selected:
            print(f"{mutant.source:24} {mutant.name}  ->  {' '.join(mutant.tests)}")
        return 1 if problems else 0
    if args.check:
        unusable = [(m, applicable(m, REPO)) for m in selected]
        for mutant, problem in unusable:
            print(f"{'ERROR' if problem else 'ok':9} [{mutant.source}] {mutant.name}")
            if problem:
                print(f"    {problem}")
        bad = sum(1 for _, problem in unusable if problem)
        print(f"mutants: {len(selected) - bad}/{len(selected)} apply")
        return 1 if bad or problems else 0
    if not selected:
        print(f"no mutant matches {args.filter!r} in {MUTANTS_DIR}")
        return 1
    if not PYTHON.exists():
        print(f"{PYTHON} is missing: run `make setup` first")
        return 1

    files = working_tree_files()
    scratch = Path(tempfile.mkdtemp(prefix="experiments-mutants-"))
    print(f"{len(selected)} mutants; scratch copies and logs in {scratch}", flush=True)
    counts: dict[str, int] = {}
    started = time.monotonic()
    for number, mutant in enumerate(selected, start=1):
        tree = scratch / f"{number:03d}"
        log = scratch / f"{number:03d}.log"
        copy_tree(files, tree)
        problem = applicable(mutant, tree)
        seconds = 0.0
        if problem is None and args.clean_first:
            returncode, seconds = run_tests(mutant.tests, tree, args.timeout, log)
            if returncode != 0:
                problem = f"its tests do not pass unbroken ({outcome(returncode)}; log {log})"
        if problem is not None:
            result = "ERROR"
            detail = problem
        else:
            target = tree / mutant.file
            target.write_text(target.read_text().replace(mutant.replace, mutant.with_, 1))
            returncode, took = run_tests(mutant.tests, tree, args.timeout, log)
            seconds += took
            result = outcome(returncode)
            detail = ""
        key = result.split("(")[0]
        counts[key] = counts.get(key, 0) + 1
        print(f"{result:9} {seconds:6.1f} s  [{mutant.source}] {mutant.name}", flush=True)
        if detail:
            print(f"    {detail}", flush=True)
        elif result != "caught":
            print(f"    tests: {' '.join(mutant.tests)}\n{tail(log)}", flush=True)
        if not args.keep and result == "caught":
            shutil.rmtree(tree, ignore_errors=True)
            log.unlink(missing_ok=True)
        elif not args.keep:
            shutil.rmtree(tree, ignore_errors=True)  # keep the log of what was not caught
    total = time.monotonic() - started
    caught = counts.get("caught", 0)
    summary = ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items()) if k != "caught")
    print(
        f"mutants: {caught}/{len(selected)} caught"
        + (f", {summary}" if summary else "")
        + f" in {total:.0f} s"
        + (f"; {len(problems)} unreadable entries" if problems else "")
    )
    if not args.keep and not any(scratch.iterdir()):
        scratch.rmdir()
    return 0 if caught == len(selected) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
