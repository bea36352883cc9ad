"""bench/catalog/root_listing.py (issue 38) on a small catalog of the shape that showed the
defect: keys added by v2 sort between two of v1's subdirectories. Both ways list the same
entries, and the dataset keeps its directory table after the measure."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from bench.catalog import root_listing
from datahub.catalog import Put, open_catalog
from datahub.catalog.model import Record


def put(key: str) -> Put:
    return Put(Record(key=key, url=f"s3://b/{key}", size=1, etag="e"))


def test_root_listing_bench_lists_the_same_with_and_without_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "catalog.db"
    catalog = open_catalog(f"sqlite:///{db}")
    try:
        catalog.create_dataset("big")
        catalog.commit("big", [put(f"s{t}/f{i}.jpg") for t in (10, 11) for i in range(3)])
        catalog.commit("big", [put(f"s100/f{i}.jpg") for i in range(50)])
    finally:
        catalog.close()
    root_listing.main(["--catalog", str(db), "--dataset", "big", "--versions", "1,2", "--rounds", "1"])
    lines = capsys.readouterr().out.splitlines()
    counts = [
        (m[1], m[2], int(m[3]))
        for m in (re.match(r"big v(\d+)\s+(table|no table)\s+(\d+) entries", x) for x in lines)
    ]
    assert counts == [("1", "table", 2), ("1", "no table", 2), ("2", "table", 3), ("2", "no table", 3)], lines
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT dirs FROM datasets WHERE name = 'big'").fetchone() == (1,)
