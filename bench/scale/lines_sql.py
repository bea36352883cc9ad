"""SQLite's insert rate for chunks of put lines (``put_lines``) in the shapes a commit could
hand it, with what each shape costs the caller's thread to make.

    .venv/bin/python bench/scale/lines_sql.py [--rows 300000] [--rounds 2] [--dir DIR]

Chunks of 2,000 of ``bench/scale``'s change lines, joined into one JSON array each, are
inserted in each shape into today's ``records`` table (its two partial indexes), in one
``BEGIN IMMEDIATE`` WAL transaction with ``synchronous=FULL``, by one
``INSERT … SELECT … FROM json_each(?)`` per chunk; shapes alternate within each round:

- ``put_lines``: what ``put_lines`` hands the store (its text and the store's statement,
  ``sqlite_writer.lines_sql``); its build cost is the whole of ``put_lines``, the check of
  every line included (the other shapes' costs come on top of a check);
- ``lines``: the lines as they are (``json_extract(value, '$.record.f')``; the first
  version of ``put_lines``);
- ``lines, INSERT``: the same without ``OR REPLACE``;
- ``lines, 16 KiB pages``;
- ``flat``: ``{"key":…,"url":…}`` (``str.replace`` of the lines' wrapper);
- ``arrays``: ``["key","url","etag",size,meta]`` (one ``re.sub`` over the chunk);
- ``array+object``: ``["key","url","etag",{"size":…,"meta":…}]`` (``str.replace`` only).

Prints records per CPU-second of the inserts, and the caller's µs per record to build the
shape (0 for the lines as they are), with the load average.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale.scale import change_lines  # noqa: E402
from datahub.catalog.put_lines import CHUNK_LINES, put_lines  # noqa: E402
from datahub.catalog.revisions import OPEN  # noqa: E402
from datahub.catalog.sqlite_schema import SCHEMA  # noqa: E402
from datahub.catalog.sqlite_writer import lines_sql  # noqa: E402

WRAP = '{"op":"put","record":'
ARRAY = re.compile(
    r'\{"op":"put","record":\{"key":("[^"]*"),"url":("[^"]*"),"etag":("[^"]*"),"size":([0-9]+)'
    r'(?:,"meta":(\{[^}]*\}))?\}\}'
)


def flat(text: str) -> str:
    return "[" + text[1 + len(WRAP) : -2].replace("}}," + WRAP, "},") + "]"


def arrays(text: str) -> str:
    return ARRAY.sub(r"[\1,\2,\3,\4,\5]", text).replace(",]", ",null]")


def array_object(text: str) -> str:
    return (
        text.replace(WRAP + '{"key":', "[")
        .replace(',"url":', ",")
        .replace(',"etag":', ",")
        .replace(',"size":', ',{"size":')
        .replace("}},[", "}],[")[:-2]
        + "]]"
    )


def columns(paths: list[str]) -> str:
    key, url, etag, size, meta, labels = (f"json_extract(value, '{p}')" for p in paths)
    return f"{key}, {url}, {etag}, {size}, NULL, {meta}, {labels}"


RECORD = columns([f"$.record.{f}" for f in ("key", "url", "etag", "size", "meta", "labels")])
SHAPES = {  # name: (build the text from the lines' array text, SELECT columns, verb, page size)
    "put_lines": (None, "", "", 4096),  # see run()
    "lines": (None, RECORD, "INSERT OR REPLACE", 4096),
    "lines, INSERT": (None, RECORD, "INSERT", 4096),
    "lines, 16 KiB pages": (None, RECORD, "INSERT OR REPLACE", 16384),
    "flat": (flat, columns([f"$.{f}" for f in ("key", "url", "etag", "size", "meta", "labels")]), "INSERT OR REPLACE", 4096),
    "arrays": (arrays, columns(["$[0]", "$[1]", "$[2]", "$[3]", "$[4]", "$[5]"]), "INSERT OR REPLACE", 4096),
    "array+object": (
        array_object,
        columns(["$[0]", "$[1]", "$[2]", "$[3].size", "$[3].meta", "$[3].labels"]),
        "INSERT OR REPLACE",
        4096,
    ),
}  # fmt: skip


def run(where: str, chunks: list[list[str]], name: str) -> tuple[float, float, tuple]:
    build, select, verb, page = SHAPES[name]
    texts = ["[" + ",".join(line.rstrip("\n") for line in chunk) + "]" for chunk in chunks]
    c = time.process_time()
    if name == "put_lines":
        shaped = [put_lines(chunk).text for chunk in chunks]  # type: ignore[union-attr]
    else:
        shaped = [build(t) for t in texts] if build else texts
    built = time.process_time() - c
    d = tempfile.mkdtemp(dir=where)
    try:
        db = sqlite3.connect(f"{d}/c.db", isolation_level=None)
        db.execute(f"PRAGMA page_size = {page}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.executescript(SCHEMA)
        sql = (
            f"{verb} INTO records (dataset_id, from_seq, to_seq, key, url, etag, size, checksum, meta, labels)"
            f" SELECT 1, 1, {OPEN}, {select} FROM json_each(?)"
        )
        if name == "put_lines":
            sql = lines_sql(1, 1, OPEN)
        db.execute("BEGIN IMMEDIATE")
        c = time.process_time()
        for text in shaped:
            db.execute(sql, (text,))
        db.execute("COMMIT")
        took = time.process_time() - c
        first = db.execute("SELECT * FROM records ORDER BY key LIMIT 1").fetchone()
        db.close()
    finally:
        shutil.rmtree(d)
    return took, built, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    lines = list(change_lines(args.rows))
    chunks = [lines[i : i + CHUNK_LINES] for i in range(0, args.rows, CHUNK_LINES)]
    where = args.dir or tempfile.gettempdir()
    print(f"{args.rows:,} rows, SQLite {sqlite3.sqlite_version}", flush=True)
    expected = None
    for _ in range(args.rounds):
        for name in SHAPES:
            took, built, first = run(where, chunks, name)
            expected = expected or first
            assert first == expected, (name, first, expected)  # every shape stores the same row
            print(
                f"{name:>22}: {args.rows / took:9,.0f} records/CPU-s; building the shape "
                f"{built / args.rows * 1e6:5.2f} µs/record; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
