"""How the disk tier writes pages: unnamed files linked into place (or tmp + rename where
O_TMPFILE is missing), and index inserts deferred into batches. A crash between a page
file and its index entry (either way round) is repaired by the rebuild at the next start."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from datahub.cache import DiskTier, make_policy
from datahub.cache.index import PageIndex
from datahub.cache.indexbatch import INDEX_BATCH
from datahub.cache.pages import PageKey

REPO = Path(__file__).resolve().parents[2]
BUDGET = 1 << 22


def key(i: int) -> PageKey:
    return PageKey(f"s3://bucket/obj{i}", "e", 1024, 0)


def data(i: int) -> bytes:
    return bytes([i % 256]) * (100 + i)


def disk_tier(path: Path) -> DiskTier:
    return DiskTier(path, BUDGET, make_policy("lru", BUDGET))


@pytest.mark.parametrize("unnamed", [True, False])
def test_pages_are_written_whole_either_way_and_nothing_is_left_in_tmp(tmp_path: Path, unnamed: bool) -> None:
    t = disk_tier(tmp_path / "d")
    if unnamed:
        assert t._tmpfile  # this kernel and file system support O_TMPFILE + linkat via /proc
    t._tmpfile = unnamed
    for i in range(5):
        assert t.put(key(i), data(i))
    assert all(t.get(key(i)) == data(i) for i in range(5))
    assert not list((tmp_path / "d" / "tmp").iterdir())
    t.close()
    t = disk_tier(tmp_path / "d")
    assert t.usage().entries == 5 and all(t.get(key(i)) == data(i) for i in range(5))
    t.close()


def test_a_page_file_another_process_wrote_is_replaced(tmp_path: Path) -> None:
    t = disk_tier(tmp_path / "d")
    path = Path(t._path(key(1)))
    path.write_bytes(b"stale bytes of an earlier writer")  # a file this process does not know
    assert t.put(key(1), data(1))  # linkat meets EEXIST: replaced, as a rename would
    assert t.get(key(1)) == data(1)
    assert not list((tmp_path / "d" / "tmp").iterdir())
    t.close()


def test_index_inserts_are_batched_and_flushed_on_close(tmp_path: Path) -> None:
    t = disk_tier(tmp_path / "d")
    for i in range(INDEX_BATCH - 1):
        t.put(key(i), data(i))
    assert t.index.count() == 0  # deferred: the tier knows the pages, the index not yet
    assert t.contains(key(0)) and t.get(key(0)) == data(0)
    t.put(key(INDEX_BATCH - 1), data(INDEX_BATCH - 1))
    assert t.index.count() == INDEX_BATCH  # a full batch is one transaction
    t.put(key(1000), data(1000))
    t.delete(key(1000))  # removed before its batch was written: never indexed
    t.put(key(1001), data(1001))
    t.close()
    index = PageIndex(tmp_path / "d" / "index")
    try:
        assert index.count() == INDEX_BATCH + 1
        assert index.used() == sum(len(data(i)) for i in [*range(INDEX_BATCH), 1001])
    finally:
        index._env.close()


def test_maintain_flushes_the_batch(tmp_path: Path) -> None:
    t = disk_tier(tmp_path / "d")
    t.put(key(1), data(1))
    assert t.index.count() == 0
    t.maintain()
    assert t.index.count() == 1 and t.index.used() == len(data(1))
    t.close()


def test_a_batch_the_index_refuses_removes_its_files_and_is_forgotten(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    t = disk_tier(tmp_path / "d")
    t.put(key(1), data(1))

    def refuse(entries):
        raise OSError("MDB_MAP_FULL")

    monkeypatch.setattr(t.index, "add_many", refuse)
    with caplog.at_level(logging.WARNING):
        t.flush_index()
    assert "recording 1 pages in the index failed" in caplog.text
    assert not os.path.exists(t._path(key(1)))  # no bytes that nobody accounts for
    assert t.usage().used == 0 and not t.contains(key(1)) and t.get(key(1)) is None
    assert t.counters.errors == 1
    monkeypatch.undo()
    assert t.put(key(1), data(1)) and t.get(key(1)) == data(1)
    t.close()


def crash_after(tmp_path: Path, body: str) -> None:
    """Run ``body`` with a DiskTier ``t`` on ``tmp_path/d`` in a child that dies without closing."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from datahub.cache import DiskTier, make_policy
        from datahub.cache.pages import PageKey
        t = DiskTier({str(tmp_path / "d")!r}, {BUDGET}, make_policy("lru", {BUDGET}))
        def key(i):
            return PageKey(f"s3://bucket/obj{{i}}", "e", 1024, 0)
        def data(i):
            return bytes([i % 256]) * (100 + i)
        """
    )
    script += textwrap.dedent(body) + "\nos._exit(0)  # no close: the index still names this process\n"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_page_files_a_crash_left_without_index_entries_are_found_at_restart(tmp_path: Path, caplog) -> None:
    crash_after(
        tmp_path,
        """
        for i in range(3):
            assert t.put(key(i), data(i))
        assert t.index.count() == 0, "the batch must not have been written for this test"
        """,
    )
    with caplog.at_level(logging.WARNING):
        t = disk_tier(tmp_path / "d")
    assert "index rebuilt from 3 page files" in caplog.text
    assert t.usage().entries == 3 and t.usage().used == sum(len(data(i)) for i in range(3))
    assert t.index.count() == 3 and t.index.used() == t.usage().used
    assert all(t.get(key(i)) == data(i) for i in range(3))
    t.close()


def test_index_entries_a_crash_left_without_page_files_are_dropped_at_restart(tmp_path: Path, caplog) -> None:
    crash_after(
        tmp_path,
        """
        for i in range(3):
            assert t.put(key(i), data(i))
        t.flush_index()
        assert t.index.count() == 3
        os.unlink(t._path(key(1)))  # the crash came between unlinking a page and unindexing it
        """,
    )
    with caplog.at_level(logging.WARNING):
        t = disk_tier(tmp_path / "d")
    assert "index rebuilt from 2 page files" in caplog.text
    assert t.usage().entries == 2 and t.index.count() == 2
    assert t.index.used() == t.usage().used == len(data(0)) + len(data(2))
    assert t.get(key(1)) is None and t.get(key(2)) == data(2)
    t.close()
