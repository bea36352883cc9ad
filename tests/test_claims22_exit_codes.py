"""docs/cli.md's exit-code table against the error tree (claims22).

The table says "Scripts can rely on these": a script branches on the exit code, so each error
``code`` the tree has must sit in the row of the exit code it really exits with, and the table
must name no code the tree does not have. Before claims22 a `busy` catalog (SQLite's write
turn held past its wait, a server at its body limit) exited 1, the row that says "a bug", and
eleven other codes were in no row at all.
"""

from __future__ import annotations

import inspect
import re
from fnmatch import fnmatchcase
from pathlib import Path

import datahub.errors as errors

REPO = Path(__file__).resolve().parent.parent


def _table() -> dict[int, list[str]]:
    """exit code -> the error codes (or ``*_not_found`` patterns) its row names."""
    section = (REPO / "docs/cli.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows: dict[int, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 3 and cells[0].isdigit():
            rows[int(cells[0])] = re.findall(r"`([a-z_*]+)`", cells[2])
    return rows


def _tree() -> dict[str, int]:
    """error code -> exit code, for every class of the one error tree."""
    classes = [c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, errors.DatahubError)]
    assert len(classes) > 20, classes
    return {c.code: c.exit_code for c in classes}


def test_every_error_code_is_in_the_row_of_its_exit_code() -> None:
    rows, tree = _table(), _tree()
    assert {1, 2, 3, 4, 5, 6, 7, 130} <= set(rows), rows
    wrong = [
        f"{code}: exits {exit_code}, but docs/cli.md's row {exit_code} does not name it"
        + "".join(f" (it is in row {n})" for n, names in rows.items() if code in names)
        for code, exit_code in sorted(tree.items())
        if not any(fnmatchcase(code, name) for name in rows.get(exit_code, []))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_table_names_no_code_the_tree_does_not_have() -> None:
    tree = _tree()
    stale = [
        f"row {n}: {name}"
        for n, names in _table().items()
        for name in names
        if not any(fnmatchcase(code, name) and tree[code] == n for code in tree)
    ]
    assert not stale, "\n".join(stale)


def test_a_busy_catalog_is_not_reported_as_a_bug() -> None:
    """A retry-later refusal must not share exit 1 ("internal error: a bug") with crashes."""
    assert errors.Busy("the catalog is busy").exit_code == errors.CatalogUnavailable("x").exit_code
