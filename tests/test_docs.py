"""Docs cannot drift: every `experiments-train` command that README.md and docs/*.md show is
planned by the installed app, and every relative link between the pages resolves.

What counts as a command: a line of a fenced code block that starts with `experiments-train`
(or `$ experiments-train`, a shell prompt), its `\\` continuation lines joined, its trailing
`# comment` dropped. Each one runs in-process through the console script's entry point
(conftest.run_cli_in_process: the same exit status, stdout and stderr as the installed
script, without a process start-up) as a dry run: `dry_run=true` is appended unless the
command sets `dry_run` itself. A dry run composes, checks and plans the whole command (every
point of a `-m` sweep, the sbatch script of a Slurm one) and writes nothing; a command must
exit 0 and leave its working directory as it found it.

Conventions the pages follow, so that every command can be checked as written:

- **A refusal** is marked at the end of its command line: `# refused: <text>`. The command
  must exit 2 and its stderr must contain <text> (a piece of the real message, verbatim).
- **A file the reader writes** (a user's own config for `--config-dir`) is a fenced block
  right after a line `<!-- file: PATH -->`: the test writes the block to PATH, relative to the
  commands' working directory, before any command runs.
- **Data this machine does not have.** The plan checks a `data.root` folder's layout (its
  `train/` and `val/` class folders, their count against `data.num_classes`; a GAN's image
  files), so a command naming `/data/...` would be refused here for a reason that is not the
  page's. For a command that is not a refusal, a `data.root` that does not exist here is
  replaced by a stand-in folder of the same layout: `train/<class>/` (one empty `.png` in the
  first) and `val/`, as many classes as the command (or the named preset) gives in
  `data.num_classes` (3 where it reads them from the folders). The dry run therefore checks
  everything but the images themselves (and the schedule it derives counts one image). A
  command on one of the papers' datasets (`data=cifar10`, `data=dvs128_gesture`, ... or a
  preset of one) gets tiny files in that dataset's own format instead
  (tests/support/datasets.py; CIFAR's read with torchvision's md5 check skipped).
- No `...` in a command: a page writes a command a reader can paste.

Commands of GAN models are marked `gan` (MMGeneration's recipes are read at planning time);
the command test is `slow` (in-process CLI calls, as in test_refusals.py), the link tests are
not.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, run_cli_in_process

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROGRAM = "experiments-train"
REFUSED = re.compile(r"\s#\s*refused:\s*(?P<text>.+?)\s*$")
FILE_MARKER = re.compile(r"^<!--\s*file:\s*(?P<path>\S+)\s*-->$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
GAN_MODELS = ("dcgan", "lsgan", "ggan", "biggan", "stylegan_ada")
CLASSES_READ_FROM_FOLDERS = 3


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    words: tuple[str, ...]
    refused: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _fenced_blocks(text: str) -> list[tuple[int, list[str], str]]:
    """(first line number, the block's lines, the line before its opening fence)."""
    blocks, lines = [], text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].lstrip().startswith("```"):
            start, body = index + 1, []
            index += 1
            while index < len(lines) and not lines[index].lstrip().startswith("```"):
                body.append(lines[index])
                index += 1
            before = next((line for line in reversed(lines[: start - 1]) if line.strip()), "")
            blocks.append((start + 1, body, before.strip()))
        index += 1
    return blocks


def _page_name(page: Path) -> str:
    return str(page.relative_to(REPO))


def commands(page: Path) -> list[Command]:
    found = []
    for first, body, _ in _fenced_blocks(page.read_text(encoding="utf-8")):
        index = 0
        while index < len(body):
            number, line = first + index, body[index].strip()
            while line.endswith("\\") and index + 1 < len(body):
                index += 1
                line = line[:-1].rstrip() + " " + body[index].strip()
            index += 1
            line = line.removeprefix("$ ")
            if not line.startswith(PROGRAM + " ") and line != PROGRAM:
                continue
            marker = REFUSED.search(line)
            words = shlex.split(line, comments=True)
            found.append(
                Command(_page_name(page), number, tuple(words[1:]), marker and marker["text"])
            )
    return found


def files(page: Path) -> list[tuple[str, str]]:
    """The blocks a page asks the reader to write: (path, content)."""
    written = []
    for _, body, before in _fenced_blocks(page.read_text(encoding="utf-8")):
        marker = FILE_MARKER.match(before)
        if marker:
            written.append((marker["path"], "\n".join(body) + "\n"))
    return written


ALL = [command for page in PAGES for command in commands(page)]
# A command shown on several pages is checked once (the first place it appears names it).
UNIQUE = list({(c.words, c.refused): c for c in ALL[::-1]}.values())
UNIQUE.sort(key=ALL.index)


def _marks(command: Command) -> list[pytest.MarkDecorator]:
    models = {w.split("=", 1)[1] for w in command.words if w.lstrip("+").startswith("model=")}
    gan = any(model in GAN_MODELS for value in models for model in value.split(","))
    return [pytest.mark.gan] if gan else []


@pytest.fixture(scope="module")
def workspace(module_tmp) -> Path:
    """The commands' working directory, holding the files the pages ask the reader to write."""
    folder = module_tmp("docs") / "work"
    folder.mkdir()
    for page in PAGES:
        for path, content in files(page):
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
    return folder


@contextlib.contextmanager
def stand_in_place() -> Iterator[Path]:
    """Where the stand-in data folders go: in memory where the machine has /dev/shm (an
    ImageNet recipe's stand-in is 1000 class folders, and removing them from this VM's disk
    took 2-3 s), removed afterwards."""
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    folder = Path(tempfile.mkdtemp(prefix="experiments-docs-", dir=where))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[Path]:
    with stand_in_place() as folder:
        yield folder


def _preset_classes(words: tuple[str, ...]) -> int | None:
    """data.num_classes of a named preset (conf/experiment/<name>.yaml, as installed)."""
    import experiments

    for word in words:
        if word.startswith("experiment="):
            preset = Path(experiments.__file__).parent / "conf" / "experiment"
            values = yaml.safe_load((preset / f"{word.split('=', 1)[1]}.yaml").read_text())
            return ((values or {}).get("data") or {}).get("num_classes")
    return None


def _data_option(words: tuple[str, ...]) -> str | None:
    """The command's data option: `data=X`, else its preset's `override /data: X`."""
    import experiments

    for word in words:
        if word.startswith("data="):
            return word.split("=", 1)[1]
    for word in words:
        if word.startswith("experiment="):
            preset = Path(experiments.__file__).parent / "conf" / "experiment"
            values = yaml.safe_load((preset / f"{word.split('=', 1)[1]}.yaml").read_text())
            for entry in (values or {}).get("defaults") or []:
                if isinstance(entry, dict) and "override /data" in entry:
                    return str(entry["override /data"])
    return None


def _stand_in_root(words: tuple[str, ...], where: Path) -> Path:
    from .support.datasets import CIFAR_FOLDERS, EVENT_DATASETS, write_cifar, write_events

    option = _data_option(words)
    if option in CIFAR_FOLDERS or option in EVENT_DATASETS:
        root = where / f"stand-in-{option}"
        if not root.is_dir():
            write = write_cifar if option in CIFAR_FOLDERS else write_events
            # N-Caltech101: enough a class for its 0.9 split to leave one for validation
            sizes = {"per_class": 10} if option == "n_caltech101" else {}
            write(root, option, **sizes)
        return root
    given = next((w.split("=", 1)[1] for w in words if w.startswith("data.num_classes=")), None)
    if given is not None and given.isdigit():
        classes = int(given)
    elif given is None and _preset_classes(words) is not None:
        classes = int(_preset_classes(words))  # type: ignore[arg-type]
    else:
        classes = CLASSES_READ_FROM_FOLDERS
    root = where / f"stand-in-{classes}-classes"
    if not root.is_dir():
        (root / "val").mkdir(parents=True)  # the plan reads the classes from train/ only
        for label in range(classes):
            (root / "train" / f"class{label:04d}").mkdir(parents=True)
        (root / "train" / "class0000" / "0.png").touch()  # the schedule counts images
    return root


def as_checked(command: Command, workspace: Path, data: Path) -> list[str]:
    words = list(command.words)
    if command.refused is None:
        for index, word in enumerate(words):
            key, _, value = word.partition("=")
            if key == "data.root" and not (workspace / value).exists():
                words[index] = f"data.root={_stand_in_root(command.words, data)}"
    if words and not any(word.startswith("dry_run=") for word in words):
        words.append("dry_run=true")
    return words


def _listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_the_pages_show_commands() -> None:
    """The collection itself: every page is read, and the README keeps its command blocks."""
    pages = {command.page for command in ALL}
    assert "README.md" in pages, pages
    assert len([c for c in ALL if c.page == "README.md"]) >= 8
    assert not [c.id for c in ALL if "..." in c.words], "a command with `...` cannot be pasted"


@pytest.mark.slow  # ~0.3 s of composing and planning a command, ~85 commands
@pytest.mark.parametrize("command", [pytest.param(c, id=c.id, marks=_marks(c)) for c in UNIQUE])
def test_each_command_plans_or_is_refused_as_the_page_says(
    command: Command, workspace: Path, stand_ins: Path
) -> None:
    if any(mark.name == "gan" for mark in _marks(command)):
        pytest.importorskip("mmgen", reason="GAN commands need MMGeneration (make setup-gan)")
    from .support.datasets import skip_cifar_md5

    before = _listing(workspace)
    words = as_checked(command, workspace, stand_ins)
    with skip_cifar_md5():  # the CIFAR stand-ins' files cannot match the real checksums
        result = run_cli_in_process(words, cwd=workspace)
    shown = f"{command.id}: {shlex.join([PROGRAM, *words])}\n{result.stderr[-3000:]}"
    if command.refused is not None:
        assert result.returncode == 2, shown
        assert command.refused in result.stderr, shown
    else:
        assert result.returncode == 0, shown
    assert "Traceback" not in result.stderr, shown
    assert _listing(workspace) == before, f"{command.id}: a dry run wrote into its directory"


def _links(page: Path) -> list[tuple[int, str]]:
    found, fenced = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            found += [(number, m["target"]) for m in LINK.finditer(line)]
    return found


def _anchors(page: Path) -> set[str]:
    """The anchors a Markdown renderer (GitHub's) gives the page's headings: lower case,
    punctuation dropped, spaces made hyphens."""
    found, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=_page_name)
def test_every_relative_link_resolves(page: Path) -> None:
    """A link to a file names one that exists; a link to a heading (`page.md#anchor`, or
    `#anchor` on the same page) names a heading that page has."""
    broken = []
    for number, target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = (page.parent / path) if path else page
        if not linked.exists() or (anchor and anchor not in _anchors(linked)):
            broken.append(f"{_page_name(page)}:{number}: {target}")
    assert not broken, broken


def test_the_docs_pages_are_linked_from_the_readme() -> None:
    """A page nobody links to is a page nobody reads."""
    linked = {target.split("#", 1)[0] for _, target in _links(REPO / "README.md")}
    missing = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in linked]
    assert not missing, missing
