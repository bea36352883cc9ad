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


# the packages whose errors reach an HTTP client: the API's routes and what they call
SERVED = ("datahub/api", "datahub/catalog", "datahub/tasks", "datahub/storage", "datahub/browser")


def _status_table() -> dict[str, list[str]]:
    """docs/api.md's status -> the error codes its row names (``5xx`` one row)."""
    section = (REPO / "docs/api.md").read_text().split("| status | codes |", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ", 1)]
        if len(cells) == 2 and re.fullmatch(r"\d(\d\d|xx)", cells[0]):
            rows[cells[0]] = re.findall(r"`([a-z_]+)`", cells[1])
    return rows


def _served_classes() -> list[type[errors.DatahubError]]:
    sources = "\n".join(p.read_text() for d in SERVED for p in (REPO / d).rglob("*.py"))
    return [
        c
        for name, c in vars(errors).items()
        if inspect.isclass(c) and issubclass(c, errors.DatahubError) and re.search(rf"\b{name}\b", sources)
    ]


def test_every_error_the_server_raises_is_in_the_row_of_its_http_status() -> None:
    """docs/api.md's status table, from the classes the server's packages name."""
    rows, served = _status_table(), _served_classes()
    assert {"400", "404", "409", "5xx"} <= set(rows) and len(served) > 15, (rows, served)
    wrong = [
        f"{c.code}: answered {c.http_status}, not in docs/api.md's row for it"
        for c in served
        if c.code not in rows.get(str(c.http_status) if c.http_status < 500 else "5xx", [])
    ]
    assert not wrong, "\n".join(wrong)
    codes = {
        c.code: c.http_status
        for c in vars(errors).values()
        if inspect.isclass(c) and issubclass(c, errors.DatahubError)
    }
    misplaced = [
        f"{status}: {code} is answered {codes[code]}"
        for status, names in rows.items()
        for code in names
        if code in codes and str(codes[code]) != status and not (status == "5xx" and codes[code] >= 500)
    ]
    assert not misplaced, "\n".join(misplaced)
