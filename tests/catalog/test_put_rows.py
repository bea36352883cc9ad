"""Checked put lines inserted by C (``put_rows``, ``_put_rows.c``) store exactly the rows, type
for type, of SQLite's ``json_each`` statement (``sqlite_writer.lines_sql``) on the same text;
a text that is not exactly checked lines is refused with nothing inserted; SQLite's errors
come back as ``sqlite3``'s; the handle found in a connection is that connection's; and a
commit of a change-set file takes this path."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import open_catalog, put_rows
from datahub.catalog.put_lines import PutLines, put_lines
from datahub.catalog.revisions import OPEN
from datahub.catalog.sqlite_schema import SCHEMA
from datahub.catalog.sqlite_writer import RowWriter, lines_sql
from datahub.cli.commit_cmd import read_changes

# make install builds the module (scripts/build_put_rows.sh): a missing build fails these tests
_put_rows = put_rows._put_rows

COLUMNS = "dataset_id, key, from_seq, to_seq, url, etag, size, checksum, meta, labels"
TYPED = ", ".join(f"{c}, typeof({c})" for c in COLUMNS.split(", "))


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.executescript(SCHEMA)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def stored(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute(f"SELECT {TYPED} FROM records ORDER BY dataset_id, key, from_seq").fetchall()


def line(key: str, url: str, etag: str, size: int, meta: dict | None, labels: dict | None) -> str:
    record: dict = {"key": key, "url": url, "etag": etag, "size": size}
    if meta is not None:
        record["meta"] = meta
    if labels is not None:
        record["labels"] = labels
    return json.dumps({"op": "put", "record": record}, separators=(",", ":")) + "\n"


def test_the_module_is_built() -> None:
    assert put_rows.BUILT, "scripts/build_put_rows.sh (make install) did not build datahub/catalog/_put_rows"


# what the pattern accepts, at its edges: key and URL characters, every printable etag
# character but '"' and '\\', sizes up to 10^18 - 1, one-field objects with strings (braces
# included) or integers, absent, either or both
SEGMENT = st.builds(str.__add__, st.sampled_from("ab09_+=,@~-"), st.text("ab09_+=,@~-. ", max_size=4))
SEGMENTS = st.lists(SEGMENT, min_size=1, max_size=3)
ETAG = st.text(st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'), max_size=12)
VALUE = st.integers(-(10**16) + 1, 10**16 - 1) | st.text(
    st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'), max_size=8
)
FIELD = st.none() | st.dictionaries(st.text("aZ09_.-", min_size=1, max_size=4), VALUE, min_size=1, max_size=1)


@st.composite
def chunks(draw: st.DrawFn) -> PutLines:
    keys = sorted(set(draw(st.lists(SEGMENTS.map("/".join), min_size=1, max_size=12))))
    lines = []
    for key in keys:
        url = f"s3://{draw(st.sampled_from(['b', 'bucket.x-1', 'B9']))}/{draw(st.sampled_from([key, 'o/' + key]))}"
        etag = draw(ETAG.map(lambda e: "e" + e))
        size = draw(st.integers(0, 10**6) | st.sampled_from([0, 10**18 - 1]))
        lines.append(line(key, url, etag, size, draw(FIELD), draw(FIELD)))
    return put_lines(lines)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=chunks(), seqs=st.sampled_from([(1, 1, OPEN), (7, 3, 9)]))
def test_c_stores_the_rows_of_the_json_each_statement(tmp_path: Path, chunk: PutLines, seqs: tuple) -> None:
    assert chunk is not None  # every line drawn is one the pattern takes
    here = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis runs every example in one tmp_path
    c_side, sql_side = connect(here / "c.db"), connect(here / "sql.db")
    try:
        assert _put_rows.insert(c_side, *seqs, chunk.text) == len(chunk)
        sql_side.execute(lines_sql(*seqs), (chunk.text,))
        assert stored(c_side) == stored(sql_side)
    finally:
        c_side.close()
        sql_side.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=chunks())
def test_a_commit_of_the_lines_stores_the_rows_of_the_same_puts_as_objects(
    tmp_path: Path, chunk: PutLines
) -> None:
    """End to end: the C path's version is the one the per-change path writes from the same
    changes (``PutLines.puts``: what the API's parser makes of the lines), row for row."""
    here = Path(tempfile.mkdtemp(dir=tmp_path))
    tables = []
    for name, changes in (("lines", [chunk]), ("objects", chunk.puts())):
        catalog = open_catalog(f"sqlite:///{here}/{name}.db")
        catalog.create_dataset("d")
        catalog.commit("d", changes)
        catalog.close()
        conn = sqlite3.connect(here / f"{name}.db")
        tables.append(stored(conn))
        conn.close()
    assert tables[0] == tables[1] and len(tables[0]) == len(chunk)


def test_a_text_not_of_checked_lines_is_refused_with_nothing_inserted(tmp_path: Path) -> None:
    good = put_lines([line(f"k/{i}", f"s3://b/k/{i}", "e", i, {"m": i}, None) for i in range(3)])
    conn = connect(tmp_path / "c.db")
    text = good.text
    for bad in [
        "",
        "[]",
        text[:-1],
        text + " ",
        text.replace('"size":0', '"size":00'),
        text.replace('"size":0', '"size":-1'),
        text.replace('"size":0', '"size":1000000000000000000'),
        text.replace('{"m":1}', '{"m":-0}'),
        text.replace('{"m":1}', '{"m":01}'),
        text.replace('{"m":1}', '{"m":1,"n":2}'),
        text.replace('{"m":1}', '{"m":1.5}'),
        text.replace('"e"', '"e\\u0041"'),
        text.replace('"e"', '"\u00e9"'),
        text.replace("},{", "}, {", 1),
        text.replace('"url"', '"URL"'),
    ]:
        assert _put_rows.insert(conn, 1, 1, OPEN, bad) is None, bad
    assert stored(conn) == []
    assert _put_rows.insert(conn, 1, 1, OPEN, text) == 3
    conn.close()


def test_put_lines_does_not_take_a_negative_zero(tmp_path: Path) -> None:
    """json.loads reads -0 as 0, which the per-line path stores as "0"; SQLite would keep "-0"."""
    text = '{"op":"put","record":{"key":"k","url":"s3://b/k","etag":"e","size":1,"meta":{"n":-0}}}\n'
    assert put_lines([text]) is None
    assert put_lines([text.replace("-0", "0")]) is not None


def test_sqlite_errors_come_back_as_sqlite3_errors_and_outside_a_transaction_it_refuses(
    tmp_path: Path,
) -> None:
    conn = connect(tmp_path / "c.db")
    conn.execute("CREATE TRIGGER no BEFORE INSERT ON records BEGIN SELECT RAISE(ABORT, 'refused here'); END")
    text = put_lines([line("k", "s3://b/k", "e", 1, None, None)]).text
    with pytest.raises(sqlite3.IntegrityError, match="refused here") as caught:
        _put_rows.insert(conn, 1, 1, OPEN, text)
    assert caught.value.sqlite_errorcode & 0xFF == sqlite3.SQLITE_CONSTRAINT
    conn.execute("DROP TRIGGER no")
    conn.execute("PRAGMA max_page_count = 12")  # a full file: what the store turns into NoSpace
    many = put_lines([line(f"k/{i:05d}", f"s3://b/k/{i:05d}", "e", i, None, None) for i in range(2000)]).text
    with pytest.raises(sqlite3.OperationalError, match="full") as caught:
        _put_rows.insert(conn, 1, 1, OPEN, many)
    assert caught.value.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL
    assert not conn.in_transaction  # SQLite rolled the whole transaction back itself
    with pytest.raises(ValueError, match="transaction"):
        _put_rows.insert(conn, 1, 1, OPEN, text)
    conn.close()
    with pytest.raises(ValueError, match="closed"):
        _put_rows.insert(conn, 1, 1, OPEN, text)
    with pytest.raises(TypeError):
        _put_rows.insert(object(), 1, 1, OPEN, text)


def test_the_handle_found_is_the_connections_own(tmp_path: Path) -> None:
    a, b = connect(tmp_path / "a.db"), connect(tmp_path / "b.db")
    b.execute("ROLLBACK")
    assert _put_rows.verify(a, str(tmp_path / "a.db")) and _put_rows.verify(b, str(tmp_path / "b.db"))
    assert not _put_rows.verify(a, str(tmp_path / "b.db"))
    memory = sqlite3.connect(":memory:")
    assert _put_rows.verify(memory, "") and not _put_rows.verify(memory, str(tmp_path / "a.db"))
    assert put_rows.inserter(a, 1, 1, OPEN) is not None
    text = put_lines([line("k", "s3://b/k", "e", 1, None, None)]).text
    assert put_rows.inserter(a, 1, 1, OPEN)(text) == 1 and len(stored(a)) == 1
    for conn in (a, b, memory):
        conn.close()


def test_a_commits_put_lines_are_inserted_by_c(tmp_path: Path) -> None:
    conn = connect(tmp_path / "c.db")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    with RowWriter(conn, 1, 1, OPEN) as writer:
        writer.write_lines(put_lines([line(f"k/{i}", f"s3://b/k/{i}", "e", i, None, None) for i in range(5)]))
    assert len(stored(conn)) == 5
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert inserts and all("VALUES (1, 1, 4611686018427387904," in s for s in inserts), inserts
    conn.close()
    path = tmp_path / "changes.jsonl"
    path.write_text(
        "".join(line(f"f/{i:05d}", f"s3://b/f/{i:05d}", "e", i, {"s": "t"}, None) for i in range(4500))
    )
    catalog = open_catalog(f"sqlite:///{tmp_path}/cat.db")
    catalog.create_dataset("d")
    assert catalog.commit("d", read_changes(str(path))).record_count == 4500
    assert [r.key for r in catalog.list_records("d", 1)][-2:] == ["f/04498", "f/04499"]


CHILD = r"""
import os, signal, sys
from datahub.catalog import open_catalog
from datahub.catalog.put_lines import put_lines

catalog = open_catalog(f"sqlite:///{sys.argv[1]}")

def changes():
    for c in range(5):  # at most two chunks queued: by the fifth, C has inserted at least two
        yield put_lines([
            '{"op":"put","record":{"key":"f/%d%04d","url":"s3://b/f","etag":"e","size":1}}\n' % (c, i)
            for i in range(2000)
        ])
    os.kill(os.getpid(), signal.SIGKILL)

catalog.commit("fresh", changes(), message="never visible")
"""


def test_a_first_commit_killed_after_c_inserted_chunks_leaves_nothing(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    catalog = open_catalog(f"sqlite:///{db}")
    catalog.create_dataset("fresh")
    catalog.close()
    child = subprocess.run([sys.executable, "-c", CHILD, str(db)], capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("SELECT count(*) FROM records").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM versions").fetchone() == (0,)
    finally:
        raw.close()
