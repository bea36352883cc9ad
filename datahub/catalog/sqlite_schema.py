"""The SQLite catalog's tables, their migrations, and how values are stored in their rows.

Why a module of its own: the store (``sqlite_store.py``) and its commit path
(``sqlite_commit.py``) both read and write these rows, and a reader of the file format should
find the whole of it in one place. The layout itself is explained in ``sqlite_store.py``.

- ``ensure_schema`` creates the tables of a new file and upgrades an older one in place
  (``PRAGMA user_version`` says which; columns added later have defaults, so old rows stay valid).
- meta, labels, acl, lineage and extra are compact JSON text, NULL when empty (most records
  have none and pay nothing for them); ``load_json`` never fails, even on over-deep legacy values.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
from typing import Any

from datahub.catalog.model import EMPTY, Record, record_from_row
from datahub.catalog.revisions import OPEN
from datahub.catalog.store import prefix_end
from datahub.validation import MAX_JSON_DEPTH, Unreadable, load_stored_json

# 2: versions.commit_digest; 3: datasets.revision; 4: dirs (sqlite_dirs); 5: datasets.sources;
# 6: leases (writer leases of workspaces, datahub.catalog.leases; made by the CREATE below);
# 7: leases.dataset (the workspace's commit target, which the API checks a taker's role on);
# 8: leases_by_target and leases_by_taker (the lease list a caller sees, made below);
# 9: browser_sessions (the dataset browser's sign-ins, datahub.browser.session);
# 10: catalog_meta's "instance" (the catalog's instance id, ``instance_id``)
SCHEMA_VERSION = 10
# the principal the API server appended to a lease's holder (``host N pid M [PRINCIPAL]``) and
# its "]": the text after the holder's last "[" (rtrim strips every character but "[" from the
# right; a principal has none), in built-in functions only, so an index on it needs nothing
# registered and any SQLite that writes the table keeps it (leases.taker_of in Python)
LEASE_TAKER = "replace(holder, rtrim(holder, replace(holder, '[', '')), '')"
#: writer leases: a table of the catalog file up to schema 8, now of ``<catalog>.leases``
#: (sqlite_leases.py); the catalog keeps the table, so a catalog from before can hand its rows over
LEASES_TABLE = """
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    expires REAL NOT NULL,
    dataset TEXT NOT NULL DEFAULT ''
);
"""
SCHEMA = (
    f"""
CREATE TABLE IF NOT EXISTS datasets (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    acl TEXT,
    created_at REAL NOT NULL,
    revision INTEGER NOT NULL DEFAULT 0,
    dirs INTEGER NOT NULL DEFAULT 0,
    sources TEXT
);
CREATE TABLE IF NOT EXISTS versions (
    dataset_id INTEGER NOT NULL REFERENCES datasets(id),
    seq INTEGER NOT NULL,
    parent INTEGER,
    message TEXT NOT NULL DEFAULT '',
    author TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    record_count INTEGER NOT NULL,
    total_bytes INTEGER NOT NULL,
    added INTEGER NOT NULL,
    removed INTEGER NOT NULL,
    modified INTEGER NOT NULL,
    lineage TEXT,
    commit_id TEXT,
    commit_digest TEXT,
    PRIMARY KEY (dataset_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS versions_commit_id ON versions(dataset_id, commit_id)
    WHERE commit_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS tags (
    dataset_id INTEGER NOT NULL,
    tag TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (dataset_id, tag)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS records (
    dataset_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    from_seq INTEGER NOT NULL,
    to_seq INTEGER NOT NULL,
    url TEXT NOT NULL,
    etag TEXT NOT NULL,
    size INTEGER NOT NULL,
    checksum TEXT,
    meta TEXT,
    labels TEXT,
    PRIMARY KEY (dataset_id, key, from_seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_began ON records(dataset_id, from_seq, key) WHERE from_seq > 1;
CREATE INDEX IF NOT EXISTS records_ended ON records(dataset_id, to_seq, key) WHERE to_seq < {OPEN};
CREATE TABLE IF NOT EXISTS dirs (
    dataset_id INTEGER NOT NULL,
    parent TEXT NOT NULL,
    path TEXT NOT NULL,
    from_seq INTEGER NOT NULL,
    to_seq INTEGER NOT NULL,
    live INTEGER NOT NULL,
    PRIMARY KEY (dataset_id, parent, path, from_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dirs_backfill (
    dataset_id INTEGER PRIMARY KEY,
    head INTEGER NOT NULL,
    cursor TEXT NOT NULL,
    stack TEXT NOT NULL,
    rows_done INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    token_hash TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    is_admin INTEGER NOT NULL,
    created_at REAL NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    extra TEXT
);
CREATE TABLE IF NOT EXISTS browser_sessions (
    id_hash TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS browser_sessions_by_token ON browser_sessions (token_hash);
CREATE TABLE IF NOT EXISTS catalog_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""
    + LEASES_TABLE
)
DATASET_COLS = "name, description, source, owner, acl, created_at, revision, sources"
RECORD_COLS = "key, url, etag, size, checksum, meta, labels"
# DirFile's columns (model.DIR_FILE_COLUMNS): meta's "mtime" when it is a JSON number, read by
# SQLite's JSON functions (stored meta nests at most MAX_JSON_DEPTH levels, far below their limit).
DIR_FILE_COLS = (
    "key, url, etag, size, CASE WHEN meta IS NOT NULL AND json_type(meta, '$.mtime') IN ('integer', 'real')"
    " THEN json_extract(meta, '$.mtime') END"
)
VERSION_COLS = (
    "seq, parent, message, author, created_at, record_count, total_bytes, added, removed, modified, lineage"
)


# records_began serves the new side of a diff a -> b, revisions that began in (a, b]. Only a
# diff from the empty state (a = 0) asks for from_seq = 1, and that diff is the listing of b,
# so the index leaves out every version 1 row: the first (largest) commit of a dataset writes
# one B-tree instead of two. Files made before keep their full index, which serves the same
# queries (the queries say ``from_seq > 1`` so that SQLite may use the partial one).


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the tables of a new file, or bring an older file up to ``SCHEMA_VERSION``.

    Only a file at another version runs any DDL: opening must not wait for a running commit.
    An older file's datasets keep ``dirs = 0`` (listed without the directory table) until
    ``sqlite_dirs_backfill`` fills it. A file at version 4 whose number an older datahub set
    back (it rewrites ``user_version`` on open) may hold commits that did not keep the
    directory table: every dataset goes back to ``dirs = 0`` and its rows are dropped."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found == SCHEMA_VERSION:
        return
    had_dirs = found and "dirs" in {row[1] for row in conn.execute("PRAGMA table_info(datasets)")}
    conn.executescript(SCHEMA)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(versions)")}
    if "commit_digest" not in columns:  # a version-1 catalog: older commits have none
        with contextlib.suppress(sqlite3.OperationalError):  # another process added it
            conn.execute("ALTER TABLE versions ADD COLUMN commit_digest TEXT")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(datasets)")}
    if "revision" not in columns:  # a version-1/2 catalog: every dataset at revision 0
        with contextlib.suppress(sqlite3.OperationalError):  # another process added it
            conn.execute("ALTER TABLE datasets ADD COLUMN revision INTEGER NOT NULL DEFAULT 0")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(datasets)")}
    if "dirs" not in columns:  # before version 4: no dataset has its directory table yet
        with contextlib.suppress(sqlite3.OperationalError):  # another process added it
            conn.execute("ALTER TABLE datasets ADD COLUMN dirs INTEGER NOT NULL DEFAULT 0")
    elif had_dirs and found < 4:  # set back by an older datahub (see above)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("UPDATE datasets SET dirs = 0")
            conn.execute("DELETE FROM dirs")
            conn.execute("DELETE FROM dirs_backfill")
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
    columns = {row[1] for row in conn.execute("PRAGMA table_info(datasets)")}
    if "sources" not in columns:  # before version 5: no dataset has sources (NULL: none)
        with contextlib.suppress(sqlite3.OperationalError):  # another process added it
            conn.execute("ALTER TABLE datasets ADD COLUMN sources TEXT")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(leases)")}
    if "dataset" not in columns:  # before version 7: no lease names its commit target
        with contextlib.suppress(sqlite3.OperationalError):  # another process added it
            conn.execute("ALTER TABLE leases ADD COLUMN dataset TEXT NOT NULL DEFAULT ''")
    # the lease list of a caller who is not a global admin reads the leases bound to each dataset
    # it may write and those it took, never the others (sqlite_store.list_leases, leasefilter18)
    conn.execute("CREATE INDEX IF NOT EXISTS leases_by_target ON leases (dataset, name)")
    conn.execute(f"CREATE INDEX IF NOT EXISTS leases_by_taker ON leases ({LEASE_TAKER}, name)")
    # made once per file; another process upgrading it at the same time keeps the first one
    conn.execute(
        "INSERT OR IGNORE INTO catalog_meta (key, value) VALUES ('instance', ?)", (secrets.token_hex(8),)
    )
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # last: a crash before it upgrades again


def dump_json(value: Any) -> str | None:
    """JSON only when non-empty: most records have no meta/labels and pay nothing for them.
    An over-deep legacy value read back as ``Unreadable`` is written as it was stored."""
    if isinstance(value, Unreadable):
        return value.stored_text()
    if not value:
        return None
    if _SORTED_ENCODER is not None and type(value) is dict:
        return "".join(_SORTED_ENCODER(value, 0))  # what json.dumps below writes, without its setup
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def dump_json_column(values: list) -> list[str | None]:
    """``[dump_json(v) for v in values]`` for a batch of rows, in one C encoder call when every
    value is a plain dict (or empty) without nested containers and without a brace in its
    strings: the batch's list is encoded once and cut at its ``},{`` boundaries (exact then:
    every ``{`` starts one of the dicts). A 10^8-record commit encodes 10^8 metas."""
    full = [v for v in values if v]
    if not full:
        return [None] * len(values)
    if _SORTED_ENCODER is None or not _PLAIN_MAPPINGS.issuperset(map(type, full)):
        return [dump_json(v) for v in values]
    whole = "".join(_SORTED_ENCODER(full, 0))
    if whole.count("{") != len(full) or whole.count("[") != 1:
        return [dump_json(v) for v in values]
    texts = iter(map("{%s}".__mod__, whole[2:-2].split("},{")))
    if len(full) == len(values):
        return list(texts)
    return [next(texts) if v else None for v in values]


_PLAIN_MAPPINGS = {dict}


def _refuse(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


# json.dumps(separators=(",", ":"), sort_keys=True) builds this C encoder on every call, which
# was the largest single cost of a large commit's rows; built once it is the same encoder. No
# cycle markers: values are validated (``check_json_field``) or read back from the store.
_SORTED_ENCODER = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _refuse, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
)


def load_json(text: str | None) -> Any:
    """A stored JSON column's value (EMPTY for NULL); never fails, even on over-deep legacy values."""
    return load_stored_json(text) if text else EMPTY


def record_of_row(row: tuple) -> Record:
    """The Record of a row selected as ``RECORD_COLS``."""
    key, url, etag, size, checksum, meta, labels = row
    return record_from_row(key, url, etag, size, checksum or "", load_json(meta), load_json(labels))


def prefix_bounds(prefix: str) -> tuple[str, tuple[str, ...]]:
    """SQL condition (and its parameters) for keys starting with ``prefix``: a range on the key
    index, unlike LIKE."""
    if not prefix:
        return "", ()
    return " AND key >= ? AND key < ?", (prefix, prefix_end(prefix))


def _maybe_deep(column: str) -> str:
    """SQL: the stored JSON text in ``column`` might nest deeper than MAX_JSON_DEPTH (the
    test of ``load_stored_json``: more brackets than the limit)."""
    brackets = f"length({column}) - length(replace(replace({column}, '{{', ''), '[', ''))"
    return f"(length({column}) > {MAX_JSON_DEPTH} AND {brackets} > {MAX_JSON_DEPTH})"


# ``record_json`` of a stored row, written by SQLite (json_quote escapes as JSON requires);
# stored meta/labels are compact JSON text and go in as they are, empty ones as {}. NULL
# for a row whose meta/labels might nest too deep for a client's parser.
RECORD_JSON = (
    f"CASE WHEN {_maybe_deep('meta')} OR {_maybe_deep('labels')} THEN NULL ELSE"
    " '[' || json_quote(key) || ',' || json_quote(url) || ',' || json_quote(etag) || ',' || size"
    " || ',' || json_quote(coalesce(checksum, '')) || ',' || coalesce(nullif(meta, ''), '{}')"
    " || ',' || coalesce(nullif(labels, ''), '{}') || ']' END"
)
