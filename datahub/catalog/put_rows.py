"""A chunk of checked put lines inserted by C (``_put_rows``), or None where that cannot be done.

Why: the writer thread of a large first commit was its bound (issue 38 item 3): SQLite's
``json_each`` statement parses each line's JSON once per column it extracts, and its
``INSERT`` runs in SQLite's bytecode engine one row at a time. SQLite itself, fed by C,
inserts the same 10-column row at ~450,000-540,000 per CPU-second (``bench/scale/c_ceiling.py``).
``_put_rows.insert`` cuts a ``PutLines`` text into fields (it only parses: ``put_lines``' regex
decided every check) and binds them to one prepared statement on the commit's own connection,
inside its transaction, with the GIL released.

When it is not used (the commit runs ``sqlite_writer.lines_sql``'s statement, as before): the
module is not built (``scripts/build_put_rows.sh``, run by ``make install``), or the handle it
finds in the ``sqlite3.Connection`` is not that connection's (CPython does not export it; the
module reads CPython 3.11's private layout, and ``inserter`` checks the file name, the
transaction state and the library version against what Python reports before any use), or a
text is not exactly the shape it parses (then ``insert`` returns None and inserts nothing).
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Callable

try:  # by name: a C module has no source, so an import statement of it would read (to
    # tests/test_layering.py) as one of the package datahub.catalog, which imports this module
    _put_rows = importlib.import_module("datahub.catalog._put_rows")
except ImportError:  # not built: the json_each statement does the same inserts
    _put_rows = None

BUILT = _put_rows is not None


def inserter(
    conn: sqlite3.Connection, dataset_id: int, new: int, to_seq: int
) -> Callable[[str], int | None] | None:
    """``insert(text)`` for a ``PutLines`` text on ``conn`` (inside its open transaction): the
    rows inserted, or None when the text was not taken (nothing inserted). None when C cannot
    be used on this connection."""
    if _put_rows is None:
        return None
    filename = conn.execute("PRAGMA database_list").fetchone()[2]
    if not _put_rows.verify(conn, filename):
        return None
    dataset_id, new, to_seq = int(dataset_id), int(new), int(to_seq)

    def insert(text: str) -> int | None:
        return _put_rows.insert(conn, dataset_id, new, to_seq, text)

    return insert
