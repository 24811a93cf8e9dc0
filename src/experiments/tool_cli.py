"""The command line every `experiments-*` tool shares (eval, export, sample, status, report).

One style, chosen so that a word means the same thing in every command: a tool takes a path
first, then `--flags` for its own options; `key=value` words are only ever config overrides,
as in experiments-train (Hydra's command line). argparse gives each tool `--help` (with the
examples and exit status below) and, for a bare call or a bad flag, its usage and exit 2.
"""

from __future__ import annotations

import argparse

EXIT_STATUS = """\
exit status:
  0  done{failed}
  2  bad input: an unknown flag or config key, a bad value, a path that is not a run (one
     line naming it), or no argument at all (this usage)"""


def parser(
    prog: str, description: str, examples: list[str], failed: str | None
) -> argparse.ArgumentParser:
    """A tool's parser: `description` first, then its examples and what its exit statuses
    mean (`failed`: when this tool exits 1; None for a tool that never does)."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    one = f"\n  1  the work failed: {failed}" if failed else ""
    epilog += "\n\n" + EXIT_STATUS.format(failed=one)
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def at_least(minimum: int) -> type:
    """An argparse `type`: an integer >= minimum, refused naming the bound."""

    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: an integer >= {minimum}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value}: an integer >= {minimum}")
        return value

    integer.__name__ = f"integer >= {minimum}"
    return integer  # type: ignore[return-value]
