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


# The family seam (experiments/families.py): outside the family packages only the seam knows
# which families and engines exist.
FAMILY_PACKAGES = ("experiments.snn", "experiments.gan")
SEAM = "experiments.families"


def _outside_the_families() -> dict[str, Path]:
    return {
        name: path
        for name, path in _modules().items()
        if name != SEAM
        and not name.startswith(tuple(f"{p}." for p in FAMILY_PACKAGES))
        and name not in FAMILY_PACKAGES
    }


def family_imports(graph: dict[str, set[str]], outside: set[str]) -> dict[str, list[str]]:
    return {
        name: sorted(t for t in graph[name] if t.startswith(FAMILY_PACKAGES))
        for name in outside
        if any(t.startswith(FAMILY_PACKAGES) for t in graph[name])
    }


def engine_mentions(source: str, engines: set[str]) -> list[str]:
    """Comparisons of something named like an engine with an engine's name
    (`plan.engine == "mmgen"`, `summary.get("engine") in ("cpu", ...)`), and family module
    paths written as strings: the ways a module decides by family without importing one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if not any("engine" in ast.unparse(side) for side in sides):
                continue
            for side in sides:
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                named = [
                    v.value for v in values if isinstance(v, ast.Constant) and v.value in engines
                ]
                if named:
                    found.append(ast.unparse(node))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(tuple(f"{p}." for p in FAMILY_PACKAGES))
        ):
            found.append(repr(node.value))
    return found


def test_only_the_seam_knows_the_families() -> None:
    from experiments import families

    graph = import_graph()
    outside = _outside_the_families()
    assert "experiments.train" in outside and "experiments.report" in outside
    assert not family_imports(graph, set(outside)), family_imports(graph, set(outside))
    engines = set(families.engine_names())
    assert engines >= {"spikingjelly", "classify", "mmgen"}
    mentions = {
        name: found
        for name, path in outside.items()
        if (found := engine_mentions(path.read_text(encoding="utf-8"), engines))
    }
    assert not mentions, mentions


def test_the_seam_check_sees_what_it_forbids() -> None:
    """The two checks above find each way a module used to decide by family."""
    engines = {"cpu", "mmgen"}
    assert engine_mentions('x = 1 if plan.engine == "mmgen" else 2', engines)
    assert engine_mentions('ok = summary.get("engine") in ("cpu", "x")', engines)
    assert engine_mentions('m = {"a": "experiments.snn.engines.cpu"}', engines)
    assert not engine_mentions('on_cpu = device == "cpu"', engines)
    graph = {"experiments.report": {"experiments.gan.plan"}, "experiments.run": set()}
    assert family_imports(graph, set(graph)) == {"experiments.report": ["experiments.gan.plan"]}


def test_architecture_md_names_only_files_that_exist() -> None:
    """ARCHITECTURE.md's one page stays true as files move: every file or folder it names in
    backticks is in the package, the repository or tests/."""
    import re

    text = (SRC.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/<>.-]+(?:\.py|\.ya?ml|/))`", text))
    assert len(named) > 20
    missing = [
        name
        for name in sorted(named)
        if "<" not in name
        and not any((base / name).exists() for base in (PACKAGE, SRC.parent, SRC.parent / "tests"))
        and not ("/" not in name and any(PACKAGE.rglob(name)))  # a bare name in its package's row
    ]
    assert not missing, missing


def long_functions(source: str, limit: int = 80) -> list[tuple[str, int]]:
    """Every function (method, nested function) of `source` longer than `limit` lines, with
    its decorators and docstring counted: the length a reader scrolls through."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if node.end_lineno - first + 1 > limit:
                found.append((node.name, node.end_lineno - first + 1))
    return found


def test_no_function_in_the_package_is_longer_than_80_lines() -> None:
    """A function a reader cannot see at once hides a second one (issue #51 found ten, one a
    class defined inside a function). Split it where the second one starts."""
    too_long = {
        str(path.relative_to(SRC)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := long_functions(path.read_text(encoding="utf-8")))
    }
    assert not too_long, too_long

    def body(lines: int, indent: str) -> str:
        return "\n".join(f"{indent}x = {i}" for i in range(lines))

    method = f"class A:\n    @staticmethod\n    def f():\n{body(80, ' ' * 8)}\n"
    assert long_functions(method) == [("f", 82)]  # the decorator, the def line and 80 more
    assert long_functions(f"def f():\n{body(79, ' ' * 4)}\n") == []


def _crossings(graph: dict[str, set[str]], source: str, target: str) -> list[str]:
    """Imports from package `source` (experiments.<source>) into package `target`."""
    return sorted(
        f"{name} -> {t}"
        for name, targets in graph.items()
        if name.startswith(f"experiments.{source}")
        for t in targets
        if t.startswith(f"experiments.{target}")
    )


def test_run_imports_no_sweeper_and_report_and_sweepers_go_one_way() -> None:
    """Issue 60: a lower layer never imports a higher one. run/ (a run's directory, its early
    stopping and its reports to a search's study: run/search_trial.py) imports nothing of
    sweepers/ (the search at the login), and report/ and sweepers/ do not import each other
    both ways (today neither imports the other: both find the study through run/)."""
    graph = import_graph()
    assert _crossings(graph, "run", "sweepers") == []
    both = _crossings(graph, "report", "sweepers") and _crossings(graph, "sweepers", "report")
    assert not both, (
        _crossings(graph, "report", "sweepers"),
        _crossings(graph, "sweepers", "report"),
    )
