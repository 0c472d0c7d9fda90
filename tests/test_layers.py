"""The layers hold: no import cycles inside the hub (every import counts, TYPE_CHECKING ones
included: a type-only cycle is broken with a Protocol in a neutral module)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


def import_cycles(package: str) -> list[list[str]]:
    """The strongly connected components of more than one module in ``package``'s import
    graph (Tarjan's algorithm, iterative)."""
    graph = grimp.build_graph(package, include_external_packages=False)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges.get(nxt, ()))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_import_cycles_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: modules that import each other through a chain are one cycle,
    a type-only import counts, and a one-way import is none."""
    pkg = tmp_path / "cyclic_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclic_pkg import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclic_pkg import c\n"
    )
    (pkg / "c.py").write_text("import cyclic_pkg.a\n")
    (pkg / "d.py").write_text("from cyclic_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic_pkg") == [["cyclic_pkg.a", "cyclic_pkg.b", "cyclic_pkg.c"]]


def test_no_import_cycles_in_hub() -> None:
    assert import_cycles("hub") == []
