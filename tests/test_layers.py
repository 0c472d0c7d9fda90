"""The import graph inside ``edge_agent`` and ``hub`` has no cycles (issue 13): no two modules
import each other, directly or through a chain. Every import counts — inside functions and
under ``TYPE_CHECKING`` too. The layers between packages are ``lint-imports``' contracts
(pyproject.toml ``[tool.importlinter]``)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


def import_cycles(package: str) -> list[list[str]]:
    """The strongly connected components (Tarjan) of more than one module among ``package``'s
    modules, each sorted; a module importing itself is no cycle."""
    graph = grimp.build_graph(package, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {
        m: sorted(n for n in graph.find_modules_directly_imported_by(m) if n in graph.modules)
        for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(start: str) -> None:
        # iterative Tarjan: (module, position in its edge list)
        work = [(start, 0)]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, i = work[-1]
            if i < len(edges[module]):
                work[-1] = (module, i + 1)
                nxt = edges[module][i]
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component: list[str] = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return sorted(cycles)


def describe(package: str, cycles: list[list[str]]) -> str:
    """The cycles, each with one concrete loop through its first module (where to cut)."""
    graph = grimp.build_graph(package, cache_dir=None)
    lines = [f"{len(cycles)} import cycle(s) in {package}:"]
    for component in cycles:
        first, *rest = component
        loops: list[tuple[str, ...]] = []
        for r in rest:
            there = graph.find_shortest_chain(importer=first, imported=r)
            back = graph.find_shortest_chain(importer=r, imported=first)
            if there is not None and back is not None:
                loops.append(there + back[1:])
        lines.append("  " + ", ".join(component))
        if loops:
            lines.append("    e.g. " + " -> ".join(min((len(loop), loop) for loop in loops)[1]))
    return "\n".join(lines)


def test_the_cycle_finder_sees_chains_function_imports_and_type_checking_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "cyclic_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclic_pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyclic_pkg import c\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclic_pkg import a\n"
    )
    (pkg / "d.py").write_text("import cyclic_pkg.a\nimport cyclic_pkg.d\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic_pkg") == [["cyclic_pkg.a", "cyclic_pkg.b", "cyclic_pkg.c"]]
    assert import_cycles("protos") == []


def test_no_import_cycles_in_edge_agent() -> None:
    cycles = import_cycles("edge_agent")
    assert not cycles, describe("edge_agent", cycles)


def test_no_import_cycles_in_hub() -> None:
    cycles = import_cycles("hub")
    assert not cycles, describe("hub", cycles)
