"""review36: a ``datahub://`` file shared by threads gives each byte once, as Python's own files do.

fsspec's ``read`` took the position, fetched, then added what it got: two threads reading one
open file both read from the same position, each got the same bytes, and the range after
them was never read (the file seemed to end early)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tests.cache.conftest import dataset_fs

SIZE = 10_000


@pytest.fixture
def fs(config, source):
    yield from dataset_fs(config, source, {"f": SIZE}, "one file")


def _meeting_fetches(f, timeout: float = 1.0) -> None:
    """Make the file's first origin fetch wait (at most ``timeout``) for a second one to start:
    without the file's lock, the second thread's read starts while the first is in flight."""
    real = f.cache.fetcher  # what the file's fsspec cache calls: its _fetch_range
    second = threading.Event()
    calls = []
    lock = threading.Lock()

    def fetch(start: int, end: int) -> bytes:
        with lock:
            calls.append(start)
            first = len(calls) == 1
        if first:
            second.wait(timeout)
        else:
            second.set()
        return real(start, end)

    f.cache.fetcher = fetch


def test_two_threads_reading_one_file_get_each_range_once(fs) -> None:
    data = fs.data["f"]
    with fs.open("ds/f", "rb") as f:
        _meeting_fetches(f)
        got: list[bytes] = []
        threads = [threading.Thread(target=lambda: got.append(f.read(1000))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got) == sorted([data[:1000], data[1000:2000]])
        assert f.tell() == 2000
        assert f.read() == data[2000:]


def test_a_forked_child_reads_a_file_whose_lock_a_parent_thread_held(fs) -> None:
    """A DataLoader worker forked while a parent thread was inside ``read`` must not wait for
    a lock that thread's copy will never release (the child is ended by SIGALRM after 20 s)."""
    data = fs.data["f"]
    with fs.open("ds/f", "rb") as f:
        holding, done = threading.Event(), threading.Event()

        def mid_read() -> None:
            with f._position_lock:
                holding.set()
                done.wait(60)

        thread = threading.Thread(target=mid_read)
        thread.start()
        holding.wait(60)
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child reports by its exit code
                try:
                    signal.alarm(20)
                    f.seek(100)
                    os._exit(0 if f.read(50) == data[100:150] else 1)
                finally:
                    os._exit(2)
        finally:
            done.set()
            thread.join()
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


TOP = "\U0010ffff"  # the greatest code point: a key may hold it


@pytest.fixture
def top_keys(config, source):
    files = {"a": 3, "d/x": 4, f"d/{TOP}{TOP}": 5, f"d/{TOP}/y": 2, "e": 6}
    yield from dataset_fs(config, source, files, "keys with U+10FFFF")


@pytest.mark.parametrize("batch", [1, 2, 1000])
def test_ls_jumps_past_a_directory_whose_keys_start_with_the_greatest_code_point(
    top_keys, monkeypatch, batch
) -> None:
    """``ls`` skipped a directory's records by starting after ``d/`` + U+10FFFF; the key
    ``d/`` + U+10FFFF U+10FFFF is after that, so the next page began with ``d`` again, and
    ``ls`` listed ``d`` for ever (its memory growing)."""
    from datahub import fs as fs_module

    monkeypatch.setattr(fs_module, "_LIST_BATCH", batch)
    real, pages = top_keys.catalog.list_records, []

    def list_records(*args, **kwargs):
        pages.append(kwargs.get("start_after"))
        assert len(pages) <= 20, f"ls keeps listing: {pages[-3:]}"
        return real(*args, **kwargs)

    monkeypatch.setattr(top_keys.catalog, "list_records", list_records)
    assert top_keys.ls("ds", detail=False) == ["ds/a", "ds/d", "ds/e"]
    assert top_keys.ls("ds/d", detail=False) == ["ds/d/x", f"ds/d/{TOP}", f"ds/d/{TOP}{TOP}"]
