"""The write-back core's arrows point one way: no import cycle inside the package, and the
flusher never reaches the namespace (``workspace``), not even for type hints.

Imports are read with ``ast`` from the source, so function-level imports and imports under
``if TYPE_CHECKING:`` count too: a cycle hidden in either is still a cycle in the design.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import datahub.writeback as writeback

PACKAGE = "datahub.writeback"


def _module_name(path: Path, root: Path, package: str) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([package, *parts])


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> modules of the same package it imports, anywhere in its source."""
    modules = {_module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor if is_pkg else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from pkg import sub`` imports the submodule sub; ``from pkg import Name`` pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules and target.startswith(package):
                    target = target.rpartition(".")[0]  # pkg.mod.Name -> pkg.mod
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


ROOT = Path(writeback.__file__).parent


def test_the_write_back_package_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert f"{PACKAGE}.workspace" in graph and f"{PACKAGE}.flusher" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in the write-back core: " + " -> ".join(cycle or [])


def test_the_flusher_never_imports_the_namespace() -> None:
    graph = import_graph(ROOT, PACKAGE)
    seen = reachable(graph, f"{PACKAGE}.flusher")
    assert f"{PACKAGE}.workspace" not in seen, sorted(seen)
    assert PACKAGE not in seen, "the flusher imports the package root, which imports the namespace"


def test_file_handles_reach_the_namespace_only_through_ports() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert f"{PACKAGE}.workspace" not in reachable(graph, f"{PACKAGE}.files")


def test_open_files_know_only_the_ports_and_plain_data() -> None:
    """``OpenFile`` talks to an uploader and a committer (ports.py), not to the parts behind them."""
    imported = import_graph(ROOT, PACKAGE)[f"{PACKAGE}.files"]
    assert imported <= {f"{PACKAGE}.ports", f"{PACKAGE}.model"}, sorted(imported)


def test_the_namespace_memory_and_the_committer_never_import_the_namespace() -> None:
    """``overlay`` (the locked memory) and ``commits`` (the journal side of an fsync) sit
    below ``workspace``; the upload pool knows only the chunk store; the committer never
    reaches the upload pool or the flusher."""
    graph = import_graph(ROOT, PACKAGE)
    for module in ("overlay", "commits", "uploads", "records", "model", "ports"):
        assert f"{PACKAGE}.workspace" not in reachable(graph, f"{PACKAGE}.{module}"), module
        assert PACKAGE not in reachable(graph, f"{PACKAGE}.{module}"), module
    assert graph[f"{PACKAGE}.uploads"] == {f"{PACKAGE}.chunks"}
    below_commits = reachable(graph, f"{PACKAGE}.commits")
    assert f"{PACKAGE}.uploads" not in below_commits and f"{PACKAGE}.flusher" not in below_commits
    assert f"{PACKAGE}.commits" not in reachable(graph, f"{PACKAGE}.overlay")


def test_the_module_map_in_docs_architecture_is_the_code() -> None:
    """docs/architecture.md draws the core's arrows; they are exactly the imports found here
    (the package root, ``owner`` and the modules importing nothing are left out of the map)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    block = doc.split("**Write-back core.**", 1)[1].split("```", 2)[1]
    drawn: dict[str, set[str]] = {}
    for line in block.strip().splitlines():
        module, _, targets = line.partition("─→")
        drawn[module.strip()] = {t.strip().removesuffix(" (types only)") for t in targets.split(",")}
    graph = import_graph(ROOT, PACKAGE)
    actual = {
        name.removeprefix(f"{PACKAGE}."): {t.removeprefix(f"{PACKAGE}.") for t in targets}
        for name, targets in graph.items()
        if name != PACKAGE and targets
    }
    assert drawn == actual


def test_the_checker_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    """The check above can fail: a cycle made only of a function-level import and a
    TYPE_CHECKING import is found, and so is one through a relative import."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pkg.b import B
            """
        )
    )
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("from . import d\n")
    (pkg / "d.py").write_text("from .c import X\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.d"} and graph["pkg.d"] == {"pkg.c"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    del graph["pkg.a"], graph["pkg.b"]
    assert find_cycle(graph) == ["pkg.c", "pkg.d", "pkg.c"]
    graph["pkg.d"] = set()
    assert find_cycle(graph) is None


def test_the_namespace_and_open_files_have_every_member_the_ports_name(unpacked_env) -> None:
    """The ports are only type hints to the code that uses them; this keeps them true."""
    from datahub.writeback.ports import Committer, FlushSource, OpenFileView, Uploader

    ws = unpacked_env.open()
    assert isinstance(ws, FlushSource)
    with ws.open("a", create=True) as handle:
        handle.write(0, b"x")
        [of] = ws.open_files()
        assert isinstance(of, OpenFileView)
        assert isinstance(of.uploads, Uploader) and isinstance(of.commits, Committer)
    for port in (Committer, FlushSource, Uploader):
        assert not isinstance(object(), port), port
