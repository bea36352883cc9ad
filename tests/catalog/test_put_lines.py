"""Chunks of plain put lines (``datahub commit --changes``) checked whole by one regex and
inserted by SQLite from their text (``put_lines``) store exactly the rows, and raise exactly
the errors, of the same lines parsed one by one into ``Put`` objects; anything the pattern
cannot decide goes the per-line way; a failure writes nothing; other stores get objects."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import Catalog, Change, Put, Record, open_catalog
from datahub.catalog.catalog import _check_change
from datahub.catalog.put_lines import PutLines, put_lines
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.cli.commit_cmd import _parse_line, read_changes
from datahub.errors import CommitIdReused, DatahubError


def line(key: str, size: int = 7, etag: str = "e1", **extra: object) -> str:
    record = {"key": key, "url": f"s3://bucket/{key}", "etag": etag, "size": size, **extra}
    return json.dumps({"op": "put", "record": record}, separators=(",", ":")) + "\n"


def counts(catalog: Catalog, seq: int) -> tuple:
    v = catalog.resolve("d", seq)
    return v.record_count, v.total_bytes, v.added, v.removed, v.modified


def rows(catalog: Catalog) -> list[tuple]:
    db = sqlite3.connect(catalog.store.path)
    try:
        return db.execute(
            "SELECT dataset_id, key, from_seq, to_seq, url, etag, size, checksum, meta, labels,"
            " typeof(size), typeof(checksum), typeof(meta), typeof(labels)"
            " FROM records ORDER BY dataset_id, key, from_seq"
        ).fetchall()
    finally:
        db.close()


def changes(lines: list[str], raw: bool, chunk: int = 3) -> Iterator[Change | PutLines]:
    """``lines`` as a change set, read lazily as the CLI reads a file: chunks of ``chunk``
    lines as ``PutLines`` where ``put_lines`` accepts them (``raw``), else line by line."""
    for i in range(0, len(lines), chunk):
        part = lines[i : i + chunk]
        fast = put_lines(part) if raw else None
        if fast:
            yield fast
        else:
            yield from (_parse_line("f", n, x) for n, x in enumerate(part, i + 1))


def both(tmp: Path, *commits: list[str], chunk: int = 3) -> tuple[Catalog, Catalog]:
    """The commits made once from chunks of lines (``put_lines`` where it accepts a chunk),
    once from the same lines parsed one by one; returns (lines catalog, objects catalog)."""
    out = []
    for name, raw in (("lines", True), ("objects", False)):
        catalog = Catalog(SQLiteCatalogStore(tmp / f"{name}.db", batch_size=4, page_size=7))
        catalog.create_dataset("d")
        for lines in commits:
            catalog.commit("d", changes(lines, raw, chunk))
        out.append(catalog)
    return out[0], out[1]


def test_plain_lines_store_the_rows_the_objects_store(tmp_path: Path) -> None:
    keys = [f"a/{i:03d} b+c=,@~_-.jpg" for i in range(10)]
    v1 = [
        line(keys[0]),
        line(keys[1], size=0, meta={"split": "train"}),
        line(keys[2], size=10**18 - 1, labels={"class": "cat"}),
        line(keys[3], meta={"n": -12}, labels={"x": 0}),
        line(keys[4], etag='W/"x"'.replace('"', "'") + " ~!#$%&()*+,-./:;<=>?@[]^_`{|}"),
        line(keys[5], meta={"s": "{[not json]}"}),
        line(keys[6], meta={"a-b.c_1": ""}),
        line(keys[7]),
        line(keys[8]),
    ]
    assert put_lines(v1[:3]) and put_lines(v1[3:6]) and put_lines(v1[6:])
    lines_cat, objects_cat = both(tmp_path, v1)
    assert rows(lines_cat) == rows(objects_cat)
    assert counts(lines_cat, 1) == counts(objects_cat, 1)
    assert lines_cat.get_record("d", 1, keys[3]).meta == {"n": -12}


@pytest.mark.parametrize(
    "odd",
    [
        line("k/b", meta={"b": 1, "a": 2}),  # several fields: the stored text is sorted
        line("k/b", meta={"f": 1.5}),
        line("k/b", meta={"z": 0}).replace(":0}", ":-0}"),  # json.loads: 0, stored as "0"
        line("k/b", meta={"n": True}),
        line("k/b", meta={"n": {"deep": 1}}),
        line("k/b", meta={}),
        line("k/b", checksum="sha256:00"),
        line("k/\u00e9"),  # non-ASCII key, and as \\u escape
        line("k/b", etag="caf\u00e9"),
        line("k/b", size=10**18),
        line("k/b", meta={"s": "tab\there"}),
        line("k/b", meta={"q": 'say "hi"'}),
        line("k/b").replace(",", ", "),
        '{"op":"put","record":{"url":"s3://bucket/k/b","key":"k/b","etag":"e1","size":7}}\n',
        line("k/b")[:-1],  # a file's last line, without its newline: still a plain line
        line("k/b").replace("s3://", "S3://"),
    ],
)
def test_lines_the_pattern_cannot_decide_take_the_per_line_path(tmp_path: Path, odd: str) -> None:
    v1 = [line("k/a"), odd, line("k/c")]
    lines_cat, objects_cat = both(tmp_path, v1)
    assert rows(lines_cat) == rows(objects_cat)
    assert counts(lines_cat, 1) == counts(objects_cat, 1)


@pytest.mark.parametrize(
    "bad",
    [
        line("k/../b"),
        line("k/./b"),
        line("k//b"),
        line("/k/b"),
        line("k/b/"),
        line("k/" + "x" * 256),
        line("/".join(["x" * 200] * 6)),  # over MAX_KEY_BYTES in all
        line("k/.datahub-hint-x"),
        line("k/b", etag=" "),
        line("k/b", etag=""),
        line("k/b", size=-1),
        line("k/b", size=2**62 + 1),
        line("k/b", meta={"datahub_unreadable": "x"}),
        line("k/b", labels={"datahub_unreadable": 1}),
        line("k/b").replace("s3://bucket/", "ftp://bucket/"),
        line("k/b").replace('"size":7', '"size":"7"'),
        line("k/b").replace('"put"', '"PUT"'),
        '{"op":"put","record":{"key":"k/b"}}\n',
        "not json\n",
    ],
)
def test_a_bad_line_fails_as_it_did_and_writes_nothing(tmp_path: Path, bad: str) -> None:
    v1 = [line(f"k/a{i:02d}") for i in range(7)] + [bad] + [line(f"k/c{i:02d}") for i in range(4)]
    assert put_lines(v1[:6])
    assert put_lines(v1[6:9]) is None
    errors = []
    for raw in (True, False):
        catalog = Catalog(SQLiteCatalogStore(tmp_path / f"{raw}.db", batch_size=4, page_size=7))
        with catalog:  # closed: its commit lock's descriptor is not left to the worker's next tests
            catalog.create_dataset("d")
            with pytest.raises(DatahubError) as caught:
                catalog.commit("d", changes(v1, raw))
            errors.append((type(caught.value), str(caught.value)))
            assert rows(catalog) == []
            assert list(catalog.log("d")) == []
    assert errors[0] == errors[1]


def test_the_cli_reader_commits_a_file_and_a_bad_line_names_its_number(tmp_path: Path) -> None:
    good = [line(f"f/{i:05d}.jpg", meta={"split": "train"}) for i in range(4500)]
    path = tmp_path / "changes.jsonl"
    path.write_text("".join(good))
    chunks = list(read_changes(str(path)))
    assert [type(c) for c in chunks] == [PutLines, PutLines, PutLines] and sum(map(len, chunks)) == 4500
    catalog = open_catalog(f"sqlite:///{tmp_path}/c.db")
    catalog.create_dataset("d")
    path.write_text("".join(good[:4300]) + line("f/../x") + "".join(good[4300:]))
    with pytest.raises(DatahubError, match="'f/../x'"):
        catalog.commit("d", read_changes(str(path)))
    path.write_text("".join(good[:4300]) + '{"op":"put"}\n' + "".join(good[4300:]))
    with pytest.raises(DatahubError, match="line 4301: "):
        catalog.commit("d", read_changes(str(path)))
    assert rows(catalog) == [] and list(catalog.log("d")) == []
    path.write_text("".join(good[:2100]) + "\n" + "".join(good[2100:]))  # a blank line is skipped
    version = catalog.commit("d", read_changes(str(path)))
    assert version.record_count == 4500 and len(rows(catalog)) == 4500


def test_chunks_that_are_not_a_fresh_first_version_are_planned_as_puts(tmp_path: Path) -> None:
    v1 = [line(f"k/{i:02d}") for i in range(0, 20, 2)]
    v2 = [line(f"k/{i:02d}", etag="e2") for i in range(0, 20, 3)] + [line(f"k/{i:02d}") for i in (1, 5)]
    unsorted = [line("z/3"), line("z/1"), line("z/2"), line("z/1", etag="e3")]
    lines_cat, objects_cat = both(tmp_path, v1, v2, unsorted)
    assert rows(lines_cat) == rows(objects_cat)
    for seq in (1, 2, 3):
        assert counts(lines_cat, seq) == counts(objects_cat, seq)
    descending = open_catalog(f"sqlite:///{tmp_path}/desc.db")
    descending.create_dataset("d")
    assert descending.commit("d", [put_lines([line("b")]), put_lines([line("a")])]).record_count == 2


def test_a_commit_id_keeps_the_digest_of_the_same_puts(tmp_path: Path) -> None:
    lines = [line(f"k/{i}", meta={"m": i}) for i in range(5)]
    catalog = open_catalog(f"sqlite:///{tmp_path}/c.db")
    catalog.create_dataset("d")
    objects = [_parse_line("f", n, x) for n, x in enumerate(lines, 1)]
    v1 = catalog.commit("d", objects, commit_id="c1")
    assert catalog.commit("d", [put_lines(lines[:2]), put_lines(lines[2:])], commit_id="c1").seq == v1.seq
    with pytest.raises(CommitIdReused):
        catalog.commit("d", [put_lines(lines[:4])], commit_id="c1")
    assert [v.seq for v in catalog.log("d")] == [1]


def test_every_store_commits_put_lines(catalog: Catalog) -> None:
    """SQLite inserts them from their text; MongoDB and the remote store get the same puts."""
    lines = [line("k/a", meta={"split": "train"}), line("k/b", labels={"c": 1}), line("k/c", size=0)]
    catalog.create_dataset("d")
    assert catalog.commit("d", [put_lines(lines)], commit_id="x").record_count == 3
    assert catalog.commit("d", [put_lines(lines)], commit_id="x").seq == 1
    assert list(catalog.list_records("d", 1)) == [
        Record("k/a", "s3://bucket/k/a", "e1", 7, meta={"split": "train"}),
        Record("k/b", "s3://bucket/k/b", "e1", 7, labels={"c": 1}),
        Record("k/c", "s3://bucket/k/c", "e1", 0),
    ]


def test_put_lines_cannot_be_built_unchecked() -> None:
    with pytest.raises(TypeError):
        PutLines('[{"op":"put","record":{"key":"../x"}}]', ["../x"], 0)
    assert put_lines([]) is None
    assert put_lines([line("a").rstrip("\n") + line("b")]) is None  # two lines in one item


SEGMENT = st.text('ab.-_ ~/"\\é\t', min_size=1, max_size=6)
FIELD = st.dictionaries(
    st.text('ab_"é', max_size=3), st.integers(-3, 3) | st.text('x{"\\é', max_size=3), max_size=2
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(SEGMENT, min_size=1, max_size=4, unique=True), meta=FIELD, labels=FIELD)
def test_any_line_the_pattern_accepts_is_the_record_the_parser_makes(
    tmp_path: Path, keys: list[str], meta: dict, labels: dict
) -> None:
    for key in sorted(keys):
        text = line(key, meta=meta, labels=labels) if meta or labels else line(key)
        if put_lines([text]) is None:
            continue
        (put,) = put_lines([text]).puts()
        parsed = _parse_line("f", 1, text)
        assert isinstance(parsed, Put) and put == parsed
        _check_change("d", 1, parsed)  # and the per-change checks accept it
