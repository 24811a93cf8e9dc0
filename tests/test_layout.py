"""The package layout shows the architecture: one package per family, shared code beside
them, and no module that imports (even lazily, inside a function) a module that imports it
back. A cycle is how `plan.py` and `plan_gan.py` used to lean on each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "experiments"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for path in PACKAGE.rglob("*.py")
        if "conf" not in path.relative_to(PACKAGE).parts[:1]
    }


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every experiments.* module this file imports, at the top or inside a function."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(path, name, known) for name, path in modules.items()}
    # importing a.b.c runs a/__init__ and a/b/__init__: a package's children do not
    # import it back in any way that matters for a cycle, so parents are not edges
    return {
        name: {t for t in targets if not name.startswith(t + ".")}
        for name, targets in graph.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_no_import_cycle_among_our_modules() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_cycle_finder_sees_a_lazy_import_cycle() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [["a", "b", "a"]]


@pytest.mark.parametrize("family", ["snn", "gan"])
def test_each_family_is_one_package_and_the_families_do_not_import_each_other(family) -> None:
    graph = import_graph()
    other = "gan" if family == "snn" else "snn"
    own = [name for name in graph if name.startswith(f"experiments.{family}")]
    assert f"experiments.{family}.plan" in own
    leaks = {
        name: sorted(t for t in graph[name] if t.startswith(f"experiments.{other}")) for name in own
    }
    assert not any(leaks.values()), leaks
