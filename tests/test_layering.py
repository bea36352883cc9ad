"""docs/architecture.md, "Layers": every rule that page states, checked against the code.

Imports are read with ``ast`` (function-level and relative imports included), so a lazy
``from fuse_adapter import x`` inside a function counts as much as one at the top. A unit is
``datahub.<first part>`` inside the library and the whole package for ``fuse_adapter``,
``csi`` and ``labelx``.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("datahub", "fuse_adapter", "csi", "labelx")
ADAPTERS = ("fuse_adapter", "csi", "labelx")
COMPOSITION_ROOTS = ("datahub.cli", "datahub.demo")
# what csi may use of the library: the public facades (it runs mounts as processes)
CSI_MAY_IMPORT = {
    "datahub",  # `from datahub import errors`
    "datahub.catalog",
    "datahub.config",
    "datahub.errors",
    "datahub.mongo_client",
    "datahub.mountinfo",
    "datahub.sqlite_pool",
    "datahub.validation",
    "datahub.workspaces",
    "fuse_adapter.daemon",
}
# each third-party SDK is imported by these modules only (docs/architecture.md)
SDK_HOMES = {
    "boto3": {"datahub.storage.s3"},
    "pymongo": {
        "datahub.mongo_client",
        "datahub.catalog.mongo_store",
        "datahub.catalog.mongo_commit",
        "datahub.catalog.mongo_schema",
        "datahub.tasks.mongo",
        "csi.volume_records",
    },
    "mongomock": {"datahub.mongo_client"},
    "pyfuse3": {"fuse_adapter.fuse_ops"},
    "trio": {"fuse_adapter.fuse_ops", "fuse_adapter.fuse_session"},
    "grpc": {"csi.server", "csi.proto_gen.csi_pb2_grpc"},
    "fsspec": {"datahub.fs"},
    "torch": {"datahub.torch._torch", "fuse_adapter.demo_step", "labelx.torch_model"},
    "jinja2": {"datahub.web.render"},
    "rados": {"datahub.storage.rados"},
    "httpx": {"datahub.api_client"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def imports() -> dict[str, set[str]]:
    """Module -> every module name it imports (absolute), first-party and third-party."""
    found: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = _module_name(path)
            here = module if path.name == "__init__.py" else module.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found[module].update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = here.split(".")[: len(here.split(".")) - node.level + 1]
                        target = ".".join(base + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    found[module].add(target)
                    # `from datahub import errors` imports datahub.errors
                    found[module].update(f"{target}.{alias.name}" for alias in node.names)
    return found


def unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "datahub" and len(parts) > 1 else parts[0]


def first_party(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def is_real_module(name: str) -> bool:
    """``datahub.errors.InvalidInput`` is a name, not a module: only count modules."""
    path = ROOT / Path(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, names in imports().items():
        for name in names:
            if first_party(name) and is_real_module(name) and unit(name) != unit(module):
                graph[unit(module)].add(unit(name))
    return graph


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of ``graph`` meets, each as the path that closes it."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def violations(rule) -> list[str]:
    return sorted(
        f"{module} imports {name}"
        for module, names in imports().items()
        for name in names
        if first_party(name) and is_real_module(name) and rule(module, name)
    )


def under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_library_never_imports_adapters_or_the_composition_roots():
    def rule(module: str, name: str) -> bool:
        library = under(module, "datahub") and not under(module, *COMPOSITION_ROOTS)
        return library and under(name, *ADAPTERS, *COMPOSITION_ROOTS)

    assert violations(rule) == []


def test_adapters_never_import_the_composition_roots_or_each_other():
    def rule(module: str, name: str) -> bool:
        if not under(module, *ADAPTERS):
            return False
        other_adapters = [a for a in ADAPTERS if not under(module, a)]
        if under(module, "csi") and name == "fuse_adapter.daemon":
            return False  # csi supervises mount processes with the daemon's helpers
        return under(name, *COMPOSITION_ROOTS, *other_adapters)

    assert violations(rule) == []


def test_csi_uses_only_the_public_facades_of_the_library():
    def rule(module: str, name: str) -> bool:
        return under(module, "csi") and not under(name, "csi") and name not in CSI_MAY_IMPORT

    assert violations(rule) == []


def test_the_cache_and_the_catalog_know_nothing_of_each_other():
    def rule(module: str, name: str) -> bool:
        return (under(module, "datahub.cache") and under(name, "datahub.catalog")) or (
            under(module, "datahub.catalog") and under(name, "datahub.cache")
        )

    assert violations(rule) == []


def test_write_back_knows_nothing_of_the_catalog_and_little_of_the_cache():
    """datahub.writeback sits beside the cache: it shares only the origin scheduler and the
    priority classes; datahub.workspaces, not the write-back core, reaches the catalog."""

    def rule(module: str, name: str) -> bool:
        if not under(module, "datahub.writeback"):
            return False
        if under(name, "datahub.catalog", "datahub.workspaces"):
            return True
        return under(name, "datahub.cache") and not under(
            name, "datahub.cache.scheduler", "datahub.cache.priority"
        )

    assert violations(rule) == []


def test_the_console_runtime_registers_no_commands_of_its_own():
    """datahub.console is below every package that owns commands: it imports none of them."""

    def rule(module: str, name: str) -> bool:
        return under(module, "datahub.console") and under(name, *ADAPTERS, *COMPOSITION_ROOTS)

    assert violations(rule) == []


def test_units_form_a_graph_without_cycles():
    assert cycles_of(unit_graph()) == []


def test_only_the_composition_roots_import_command_modules():
    """A ``*_cmd`` module parses a command's flags and hands over; nothing below the
    composition roots imports one (what a handler and a library module share lives in a
    module of its own). A package registers its own commands by name, as strings given to
    ``datahub.console.runner`` (``datahub.cli.main.COMMANDS``, ``fuse_adapter.__main__``),
    never by importing them; so the roots are the only importers."""

    def rule(module: str, name: str) -> bool:
        return name.rpartition(".")[2].endswith("_cmd") and not under(module, *COMPOSITION_ROOTS)

    assert violations(rule) == []


def module_graph() -> dict[str, set[str]]:
    """Module -> the modules of its own unit it imports, anywhere in its source (function
    level and ``if TYPE_CHECKING:`` included). ``from pkg import sub`` is an edge to the
    submodule ``sub`` only; ``from pkg.mod import Name`` an edge to ``pkg.mod``."""
    modules = {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]  # pkg.mod.Name -> pkg.mod
                if target and target != module and unit(target) == unit(module):
                    graph[module].add(target)
    return graph


def test_no_import_cycle_inside_a_unit():
    """Inside each unit, modules import one way. Every import counts, also one inside a
    function or under ``if TYPE_CHECKING:``: a late import that only breaks a cycle at run
    time is still a cycle in the design (the stricter of the two readings, and it holds)."""
    assert cycles_of(module_graph()) == []


@pytest.mark.parametrize("sdk", sorted(SDK_HOMES))
def test_each_sdk_is_imported_in_its_home_module_only(sdk: str):
    users = {module for module, names in imports().items() if any(under(n, sdk) for n in names)}
    assert users <= SDK_HOMES[sdk], f"{sdk} imported outside its home: {sorted(users - SDK_HOMES[sdk])}"


def test_the_doc_states_the_rules_this_module_checks():
    """The rules are written down where a reader looks for them, in the same words."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    for phrase in (
        "never imports `fuse_adapter`, `csi`, `labelx`",
        "`datahub.console`",
        "composition roots",
        "no cycle",
        "no import cycle inside a unit",
        "Only they import a command module (`*_cmd`)",
        "tests/test_layering.py",
    ):
        assert phrase in section, phrase
    for sdk in SDK_HOMES:
        assert re.search(rf"`{sdk}`", section), f"{sdk} missing from docs/architecture.md Layers"


def test_the_browser_sits_above_the_api():
    """datahub.browser uses the API's services, tokens and access rules; the API never imports
    it (the composition roots mount it), and nothing but those roots does."""

    def rule(module: str, name: str) -> bool:
        return under(name, "datahub.browser") and not under(module, "datahub.browser", *COMPOSITION_ROOTS)

    assert violations(rule) == []


def test_html_is_rendered_one_way():
    """Every page of both web UIs goes through datahub.web (Jinja2, autoescape); no module
    builds HTML with string.Template any more."""
    users = {module for module, names in imports().items() if "string" in names or "string.Template" in names}
    assert not any(under(m, "labelx", "datahub.web", "datahub.browser") for m in users), sorted(users)
    assert "datahub.web" in imports()["labelx.pages"]


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: a function-level import is counted (or the rules above prove nothing)."""
    assert "fuse_adapter.daemon" in imports()["csi.mounts"]
    assert any(name.startswith("datahub.storage") for name in imports()["datahub.catalog.catalog"])
