"""A test that writes machine-wide kernel state is marked ``exclusive``.

``make test`` runs the suite on two pytest-xdist workers; a test that writes a sysctl
(``/proc/sys/...``, e.g. ``vm/drop_caches``) or a module parameter (``/sys/module/...``, e.g.
``fuse/parameters/enable_uring``) changes what every other test on the machine sees, so it
must carry ``@pytest.mark.exclusive`` (or its module's ``pytestmark``): workers skip it and
the serial pass runs it alone (docs/architecture.md, "Running the suite in parallel").

Read from the test sources (ast): a write is ``<path>.write_text/write_bytes(...)`` or
``open(<path>, "w"...)`` on a path under those trees, given literally, through a module-level
name, or through a name imported from a datahub module (``fuse_adapter.uring.PARAM``); or a
shell line with ``sysctl -w`` or ``> /proc/sys/``. A test is caught when it does such a write
itself, calls a function (of its module, or imported from another test module) that does,
or takes a fixture that does.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
GLOBAL_TREES = ("/proc/sys/", "/sys/module/")
SHELL_WRITES = ("sysctl -w", "> /proc/sys/", ">/proc/sys/")
PACKAGES = ("datahub", "fuse_adapter", "csi", "labelx")


def _global_path(value: object) -> bool:
    return isinstance(value, str | Path) and str(value).startswith(GLOBAL_TREES)


class Module:
    """One test module's functions and what its names stand for."""

    def __init__(self, name: str, tree: ast.Module) -> None:
        self.name = name
        self.tree = tree
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.paths: set[str] = set()  # names bound to a machine-wide path
        self.imported: dict[str, tuple[str, str]] = {}  # name -> (test module, function)
        for node in tree.body:
            if isinstance(node, ast.Assign) and self._literal_path(node.value):
                self.paths |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    local = alias.asname or alias.name
                    if node.module.startswith("tests."):
                        self.imported[local] = (node.module, alias.name)
                    elif local.isupper() and node.module.split(".")[0] in PACKAGES:  # constants
                        value = getattr(importlib.import_module(node.module), alias.name, None)
                        if _global_path(value):
                            self.paths.add(local)

    @staticmethod
    def _literal_path(node: ast.expr) -> bool:
        """``"/proc/sys/..."`` or ``Path("/proc/sys/...")``."""
        if isinstance(node, ast.Call) and node.args:
            node = node.args[0]
        return isinstance(node, ast.Constant) and _global_path(node.value)

    def _is_global(self, node: ast.expr) -> bool:
        return self._literal_path(node) or (isinstance(node, ast.Name) and node.id in self.paths)

    def writes(self, func: ast.FunctionDef) -> bool:
        for node in ast.walk(func):
            if isinstance(node, ast.Constant) and any(s in str(node.value) for s in SHELL_WRITES):
                return True
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr in ("write_text", "write_bytes")
                and self._is_global(f.value)
            ):
                return True
            if isinstance(f, ast.Name) and f.id == "open" and node.args and self._is_global(node.args[0]):
                mode = node.args[1] if len(node.args) > 1 else None
                if isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wa+"):
                    return True
        return False

    def marked_exclusive(self, func: ast.FunctionDef) -> bool:
        def exclusive(node: ast.AST) -> bool:
            return any(isinstance(n, ast.Attribute) and n.attr == "exclusive" for n in ast.walk(node))

        module_marks = [
            n.value
            for n in self.tree.body
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
        ]
        return any(exclusive(d) for d in func.decorator_list) or any(exclusive(m) for m in module_marks)


def unmarked_writers(modules: dict[str, Module]) -> list[str]:
    """Tests (``module::name``) that write machine-wide state without the exclusive mark."""
    touching = {(m.name, f) for m in modules.values() for f, node in m.functions.items() if m.writes(node)}
    changed = True
    while changed:  # callers and fixture users of a writer are writers, until nothing changes
        changed = False
        for m in modules.values():
            for fname, func in m.functions.items():
                if (m.name, fname) in touching:
                    continue
                used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
                used |= {a.arg for a in func.args.args}
                for name in used:
                    target = m.imported.get(name, (m.name, name))
                    if target in touching:
                        touching.add((m.name, fname))
                        changed = True
                        break
    return sorted(
        f"{mod}::{fname}"
        for mod, fname in touching
        if fname.startswith("test_") and not modules[mod].marked_exclusive(modules[mod].functions[fname])
    )


def _test_modules() -> dict[str, Module]:
    modules = {}
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == Path(__file__).name:  # its own examples below
            continue
        name = ".".join(("tests", *path.relative_to(TESTS).with_suffix("").parts))
        modules[name] = Module(name, ast.parse(path.read_text(), str(path)))
    return modules


def test_every_test_that_writes_a_sysctl_or_module_parameter_is_exclusive() -> None:
    assert unmarked_writers(_test_modules()) == []


def _one(source: str) -> dict[str, Module]:
    return {"tests.m": Module("tests.m", ast.parse(source))}


@pytest.mark.parametrize(
    "source",
    [
        'from pathlib import Path\ndef test_a():\n    Path("/proc/sys/vm/drop_caches").write_text("3")\n',
        'def drop():\n    open("/proc/sys/vm/drop_caches", "w").write("3")\ndef test_a():\n    drop()\n',
        "from fuse_adapter.uring import PARAM\nimport pytest\n"
        '@pytest.fixture\ndef off():\n    PARAM.write_text("N")\n'
        "def test_a(off):\n    pass\n",
        'import subprocess\ndef test_a():\n    subprocess.run(["sh", "-c", "sysctl -w vm.x=1"])\n',
    ],
)
def test_the_guard_catches_an_unmarked_writer(source: str) -> None:
    assert unmarked_writers(_one(source)) == ["tests.m::test_a"]
    marked = source.replace("def test_a", "@pytest.mark.exclusive\ndef test_a")
    assert unmarked_writers(_one(marked)) == []


def test_the_guard_lets_readers_through() -> None:
    source = 'from pathlib import Path\ndef test_a():\n    Path("/proc/sys/vm/swappiness").read_text()\n'
    assert unmarked_writers(_one(source)) == []
