"""The import rules of the house, checked on the source (every import,
function-level ones included, since those are how a cycle hides):

- the rooms of `harness` (docs/design-notes.md, "The map of the harness")
  import one way: each only the rooms MAY_USE lists for it, and from another
  room only the names its ``__init__`` lists (its public surface);
- no import cycle inside `harness`;
- `harness/results/report.py` imports nothing from `harness.scenarios`;
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


# base: the package itself, the exception tree, the asyncio helpers
BASE = {"harness", "harness.errors", "harness.aio"}
# which room may import which: one direction, lowest first
MAY_USE: dict[str, set[str]] = {
    "base": set(),
    "wire": {"base"},
    "judge": {"base", "wire"},
    "load": {"base"},
    "fleet": {"base"},
    "results": {"base", "judge"},
    "sandbox": {"base", "wire", "judge"},
    "scenarios": {"base", "wire", "judge", "load", "results", "sandbox", "fleet"},
    "cli": {"base", "wire", "judge", "load", "results", "sandbox", "scenarios"},
    "entry": {"base", "cli"},  # harness/__main__.py
}


def room(module: str) -> str:
    if module in BASE:
        return "base"
    if module == "harness.__main__":
        return "entry"
    name = module.split(".")[1]
    if name not in MAY_USE:
        raise AssertionError(f"{module} is in no room: put it in one of {sorted(MAY_USE)} (or extend MAY_USE and the map in docs/design-notes.md)")
    return name


def wrong_arrows(g: dict[str, set[str]]) -> list[str]:
    """Every import from a room into one it may not use."""
    out = []
    for m, deps in sorted(g.items()):
        for d in sorted(deps):
            if room(d) != room(m) and room(d) not in MAY_USE[room(m)]:
                out.append(f"{m} -> {d} ({room(m)} may use {sorted(MAY_USE[room(m)]) or 'nothing'}, not {room(d)})")
    return out


def surface_of(package: str) -> dict[str, set[str]]:
    """A room's public surface from its __init__: {submodule: names} of its
    ``surface(__name__, {...})`` table, or {"": __all__} for an eager one."""
    tree = ast.parse((REPO / package.replace(".", "/") / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "surface":
            return {k.value: {e.value for e in v.elts} for k, v in zip(node.args[1].keys, node.args[1].values)}
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return {"": {e.value for e in node.value.elts}}
    raise AssertionError(f"{package}/__init__.py names no public surface")


def private_uses() -> list[str]:
    """Imports of another room's names that its __init__ does not list."""
    out = []
    for p in (REPO / "harness").rglob("*.py"):
        me = module_name(p)
        package = me if p.name == "__init__.py" else me.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            parts = mod.split(".")
            if parts[0] != "harness" or mod in BASE or room(mod) in ("base", room(me)):
                continue
            pkg, sub = ".".join(parts[:2]), ".".join(parts[2:])
            table = surface_of(pkg)
            listed = table.get("", set()) | (table.get(sub, set()) if sub else set().union(*table.values()))
            for a in node.names:
                if a.name not in listed:
                    out.append(f"{p.relative_to(REPO)}:{node.lineno}: {a.name} from {mod} is not on {pkg}'s surface ({pkg.replace('.', '/')}/__init__.py)")
    return out


def test_rooms_import_one_way():
    assert wrong_arrows(harness_graph()) == []


def test_the_room_rule_catches_an_upward_import():
    """The check can fail: the wire importing a scenario, or results reaching
    into the sandbox, is named."""
    g = harness_graph()
    g["harness.wire.client"] = g["harness.wire.client"] | {"harness.scenarios.stress"}
    g["harness.results.report"] = g["harness.results.report"] | {"harness.sandbox.launcher"}
    assert wrong_arrows(g) == [
        "harness.results.report -> harness.sandbox.launcher (results may use ['base', 'judge'], not sandbox)",
        "harness.wire.client -> harness.scenarios.stress (wire may use ['base'], not scenarios)",
    ]


def test_every_room_names_its_surface_and_is_used_through_it():
    for pkg in sorted({".".join(m.split(".")[:2]) for m in harness_graph() if room(m) not in ("base", "entry")}):
        assert surface_of(pkg), pkg
    assert private_uses() == []


def test_no_import_cycle_in_harness():
    assert cycles(harness_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    """The check can fail: a graph with a loop is reported."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]


def test_report_imports_nothing_from_scenarios():
    deps = imports_of(REPO / "harness" / "results" / "report.py")
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
    print("arrows against the rooms' order:", wrong_arrows(harness_graph()) or "none")
    print("names used past a room's surface:", private_uses() or "none")
