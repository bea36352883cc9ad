"""``import torch`` costs 2-3 CPU-s, and every pytest-xdist worker collects every test module, so a
test module that imports torch at its top makes each worker pay it before any test runs
(collect21: ~21 % of the collection CPU). datahub.torch loads its names on first use, so the
file helpers, the sources and the test modules that only use them at collection import no
torch; the torch classes still import from ``datahub.torch`` as docs/torch.md shows."""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _names_torch_at_its_top(text: str) -> bool:
    """Whether a statement run at import (not a function's body, not the docstring) says torch.

    Each statement's source segment as ``ast.get_source_segment`` cuts it, from the lines split
    once: ``get_source_segment`` splits the whole file again for every statement, which made
    this scan most of a worker's CPU for this module (suite36)."""
    tree = ast.parse(text)
    lines = io.StringIO(text, newline="").readlines()  # "\n", "\r\n", "\r": get_source_segment's split
    run_at_import = [
        node
        for node in tree.body
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
    ]
    return any("torch" in _segment(lines, node) for node in run_at_import)


def _segment(lines: list[str], node: ast.stmt) -> str:
    """``ast.get_source_segment(text, node)`` of the text split into ``lines`` (offsets in UTF-8)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    start, end = node.col_offset, node.end_col_offset
    if first == last:
        return lines[first].encode()[start:end].decode()
    head = lines[first].encode()[start:].decode()
    tail = lines[last].encode()[:end].decode()
    return head + "".join(lines[first + 1 : last]) + tail


def _test_modules_naming_torch() -> list[str]:
    """Every test module that says "torch" in what runs when it is collected: found, not
    listed, so a new one is checked too (tests/torch/test_fork25_torch.py imported torch at its
    top for a stop: a quarter of a worker's collection CPU, suiteC26)."""
    return sorted(
        ".".join(path.relative_to(REPO).with_suffix("").parts)
        for path in (REPO / "tests").rglob("test_*.py")
        if "torch" in (text := path.read_text()) and _names_torch_at_its_top(text)
    )


def _no_torch() -> tuple[str, ...]:
    """The modules whose import (a worker's collection of them) must not import torch.

    Found when the test runs, not when it is collected: the scan parses every test module that
    says torch, and each xdist worker collects this module (0.8 CPU-s each, suite36)."""
    return (
        "datahub.torch",
        "datahub.torch.files",
        "datahub.torch.sources",
        *_test_modules_naming_torch(),
    )


PROBE = """
import importlib, json, sys
loaded = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    loaded[name] = "torch" in sys.modules
from datahub.torch import CacheSource, MountSource, OPEN_BUFFER, open_file, read_file, image_loader
loaded["file helpers and sources"] = "torch" in sys.modules
from datahub.torch import VersionDataset
loaded["VersionDataset"] = "torch" in sys.modules
import datahub.torch
unresolved = [n for n in datahub.torch.__all__ if getattr(datahub.torch, n, None) is None]
same = set(datahub.torch.__all__) == set(datahub.torch._WHERE) and len(datahub.torch.__all__) == 16
print(json.dumps({"loaded": loaded, "unresolved": unresolved, "all_is_the_table": same}))
"""


def test_collecting_the_torch_free_modules_imports_no_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *_no_torch()], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    loaded = result["loaded"]
    torch_after = [name for name, has in loaded.items() if has and name != "VersionDataset"]
    assert torch_after == [], f"torch imported by {torch_after[0]}: import it inside the test that uses it"
    assert loaded["VersionDataset"], "a torch class still comes from datahub.torch (and imports torch)"
    # the lazy table and the submodules agree: no public name fails only when a user first touches it
    assert result["unresolved"] == [] and result["all_is_the_table"]


def test_the_scan_cuts_each_statement_as_get_source_segment_does() -> None:
    # the scan's own cut (the lines split once) decides as ast.get_source_segment did
    tricky = (
        'x = "é\\u00e9"; y = ("torch",\r\n     "ü")\rz = {\n  "a": 1,  # torch in a comment\n}\nimport os\n'
    )
    texts = [tricky] + [
        path.read_text()
        for path in sorted((REPO / "tests").rglob("test_*.py"))
        if "torch" in path.read_text()
    ]
    for text in texts:
        lines = io.StringIO(text, newline="").readlines()
        for node in ast.parse(text).body:
            assert _segment(lines, node) == ast.get_source_segment(text, node)
