"""bench/scale/small_commit.py (issue 38 item 3) on a 3,000-record catalog of the kept
catalog's shape: the 1 % commit it makes at 10^8, with and without reading pages ahead, runs
in the suite, and each run changes keys no run before changed; its ``--clustered`` commit,
and the eighth pass's delta_ab.py and disk_reads.py (what each mode writes, and that the
in-place mode leaves the catalog as it was)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from bench.scale import delta_ab, disk_reads, scale, small_commit
from datahub.catalog import Put, open_catalog


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 3,000-record ``big`` in the kept catalog's key shape (``scale.key_tree``)."""
    monkeypatch.setattr(scale, "key_of", scale.key_tree)  # restored after the test
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        catalog.create_dataset("big")
        catalog.commit("big", (Put(scale.record(i)) for i in range(3000)))
    finally:
        catalog.close()
    return tmp_path


def test_small_commit_bench_commits_a_spread_version_on_the_head(
    kept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path = kept
    for threads in ("0", "2"):
        small_commit.main(
            ["--catalog", str(tmp_path), "--records", "3000", "--evict", "--read-ahead-threads", threads]
        )
    out = capsys.readouterr().out
    assert "v2: 30 changes (6 added, 6 removed, 18 modified)" in out
    assert "v3: 30 changes (6 added, 6 removed, 18 modified)" in out
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        assert catalog.resolve("big", "latest").record_count == 3000
        changed = [e.key for e in catalog.diff("big", 1, 3)]
        assert len(changed) == 60 == len(set(changed))  # v3 touched no key v2 touched
    finally:
        catalog.close()


def _rows(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_each_mode_writes_what_it_says(kept: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = kept / "catalog.db"
    before = _rows(db, "SELECT key, from_seq, to_seq FROM records ORDER BY key, from_seq")
    common = ["--catalog", str(kept), "--records", "3000", "--side", str(kept), "--evict"]
    delta_ab.main([*common, "--mode", "inplace"])
    assert (
        _rows(db, "SELECT key, from_seq, to_seq FROM records ORDER BY key, from_seq") == before
    )  # rolled back
    delta_ab.main([*common, "--mode", "leaves"])
    delta_ab.main([*common, "--mode", "delta", "--readers"])
    out = capsys.readouterr().out
    assert out.count("30 changes looked up (24 with an open revision)") == 3
    side = kept / "delta.db"
    # 18 modified + 6 added puts, 18 modified + 6 deleted closes, all of version 2
    assert _rows(side, "SELECT seq, count(*) FROM delta_put GROUP BY seq") == [(2, 24)]
    assert _rows(side, "SELECT seq, count(*) FROM delta_close GROUP BY seq") == [(2, 24)]
    assert "lookup (records + side)" in out and "listing of a key range (records + side)" in out
    assert _rows(db, "SELECT key, from_seq, to_seq FROM records ORDER BY key, from_seq") == before


def test_a_clustered_commit_changes_one_run_of_keys(kept: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small_commit.main(["--catalog", str(kept), "--records", "3000", "--clustered"])
    assert "v2: 30 changes (6 added, 0 removed, 24 modified)" in capsys.readouterr().out
    catalog = open_catalog(f"sqlite:///{kept / 'catalog.db'}")
    try:
        modified = sorted(e.key for e in catalog.diff("big", 1, 2) if e.kind == "modified")
    finally:
        catalog.close()
    run = [scale.key_of(i) for i in range(3000)]  # v1's keys, in key order
    first = run.index(modified[0])
    # 30 consecutive keys of v1, each fifth of them replaced by an added key
    assert modified == [k for j, k in enumerate(run[first : first + 30]) if j % 5 < 4]


def test_disk_reads_reads_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * (4 << 20))
    monkeypatch.setattr(sys, "argv", ["disk_reads.py", str(path), "--seconds", "0.05", "--depths", "1,2"])
    disk_reads.main()
    out = capsys.readouterr().out
    assert out.count("random 4 KiB reads") == 2 and out.count("sequential") == 2
