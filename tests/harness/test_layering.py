"""The import rules of the house, checked on the source (every import,
function-level ones included, since those are how a cycle hides):

- no import cycle inside `harness`;
- `harness/report.py` imports nothing from `harness.scenarios`;
- the harness uses the mock's pure grammar modules (mock.markers, mock.catalog,
  mock.errors) and nothing else of it; the mock imports nothing of harness or
  refkernel; refkernel imports nothing of harness or mock.

Run by hand: `.venv/bin/python tests/harness/test_layering.py` prints the
module graph's cycles (none) and each rule's result."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "mock", "refkernel")
GRAMMAR = {"mock", "mock.markers", "mock.catalog", "mock.errors"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, resolved to absolute names."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            for a in node.names:  # `from . import stress` imports a module
                found.add(f"{mod}.{a.name}")
    return found


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    names = {module_name(p) for p in files}
    return {module_name(p): {m for m in imports_of(p) if m in names and m != module_name(p)} for p in files}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def harness_graph() -> dict[str, set[str]]:
    # a package's __init__ importing its own submodules is how a package is
    # built, not a cycle of the code: leave those edges out
    g = graph()
    return {m: {d for d in deps if d.startswith("harness") and not (m + ".").startswith(d + ".")} for m, deps in g.items() if m.startswith("harness")}


def test_no_import_cycle_in_harness():
    assert cycles(harness_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    """The check can fail: a graph with a loop is reported."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]


def test_report_imports_nothing_from_scenarios():
    deps = imports_of(REPO / "harness" / "report.py")
    assert not {d for d in deps if d.startswith("harness.scenarios")}, deps


def test_the_harness_uses_only_the_mocks_grammar():
    bad = {}
    for p in (REPO / "harness").rglob("*.py"):
        used = {d for d in imports_of(p) if d == "mock" or d.startswith("mock.")}
        # `from mock.markers import X` also yields `mock.markers.X`: names, not modules
        used = {d for d in used if not any(d.startswith(g + ".") and d.count(".") == g.count(".") + 1 for g in GRAMMAR - {"mock"})}
        if used - GRAMMAR:
            bad[str(p.relative_to(REPO))] = sorted(used - GRAMMAR)
    assert bad == {}


def test_the_mock_and_refkernel_stand_alone():
    for pkg, banned in (("mock", ("harness", "refkernel")), ("refkernel", ("harness", "mock"))):
        for p in (REPO / pkg).rglob("*.py"):
            used = {d.split(".")[0] for d in imports_of(p)}
            assert not used & set(banned), (p, used & set(banned))


if __name__ == "__main__":
    found = cycles(harness_graph())
    print(f"harness modules: {len(harness_graph())}; import cycles: {found or 'none'}")
