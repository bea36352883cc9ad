"""ReadOnlyView without FUSE: read windows, merged concurrent misses, budgets, virtual files."""

from __future__ import annotations

import os
import threading

import pytest

from datahub.errors import ReadOnly
from datahub.storage.base import ObjectRef
from fuse_adapter.readonly import ReadOnlyView
from fuse_adapter.tree import ROOT_INODE, ListingTree

MiB = 1024**2


class BytesSource:
    """A ByteSource over in-memory objects that counts the requests it serves."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.requests: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def read(self, ref: ObjectRef, offset: int = 0, size: int | None = None) -> bytes:
        with self._lock:
            self.requests.append((ref.url, offset, size or 0))
        data = self.objects[ref.url]
        return data[offset : len(data) if size is None else offset + size]


def _view(
    objects: dict[str, bytes], window: int, budget: int = 256 * MiB
) -> tuple[ReadOnlyView, BytesSource]:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b")
    tree.add_files(feed, [(k, len(v), 0, f"memory://b/{k}", "e") for k, v in sorted(objects.items())])
    tree.finish_feed(feed)
    source = BytesSource({f"memory://b/{k}": v for k, v in objects.items()})
    return ReadOnlyView(tree, source, window_bytes=window, window_budget=budget), source


def test_sequential_reader_window_grows_and_costs_few_requests() -> None:
    data = os.urandom(40 * MiB + 5)
    view, source = _view({"big": data}, window=16 * MiB)
    fh = view.open(view.lookup(ROOT_INODE, "big"))
    out = bytearray()
    while chunk := view.read(fh, len(out), 128 * 1024):
        out += chunk
    view.release(fh)
    assert bytes(out) == data
    assert len(source.requests) <= 12  # 128K, 256K, ... 16M, 16M, ...: not 321 requests
    assert max(size for _, _, size in source.requests) <= 16 * MiB
    assert view._window_used == 0


def test_random_reads_fetch_exactly_what_they_ask_for() -> None:
    data = os.urandom(8 * MiB)
    view, source = _view({"f": data}, window=16 * MiB)
    fh = view.open(view.lookup(ROOT_INODE, "f"))
    for offset in (5 * MiB, 1 * MiB, 7 * MiB, 3 * MiB):
        assert view.read(fh, offset, 4096) == data[offset : offset + 4096]
    assert [size for _, _, size in source.requests] == [4096] * 4


def test_concurrent_reads_inside_a_pending_window_merge() -> None:
    data = os.urandom(8 * MiB)
    view, source = _view({"f": data}, window=8 * MiB)
    fh = view.open(view.lookup(ROOT_INODE, "f"))
    assert view.read(fh, 0, MiB) == data[:MiB]
    results: dict[int, bytes] = {}
    threads = [
        threading.Thread(target=lambda o=o: results.__setitem__(o, view.read(fh, o, MiB)))
        for o in range(MiB, 8 * MiB, MiB)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(results[o] == data[o : o + MiB] for o in results) and len(results) == 7
    assert len(source.requests) < 1 + 7  # at least one window fetch served several reads


def test_window_budget_is_respected() -> None:
    data = os.urandom(4 * MiB)
    view, source = _view({"a": data, "b": data}, window=4 * MiB, budget=3 * MiB)
    handles = [view.open(view.lookup(ROOT_INODE, n)) for n in ("a", "b")]
    for fh in handles:
        offset = 0
        while chunk := view.read(fh, offset, MiB):
            assert chunk == data[offset : offset + MiB]
            offset += len(chunk)
        assert view._window_used <= 3 * MiB
    for fh in handles:
        view.release(fh)
    assert view._window_used == 0


def test_write_open_is_refused_and_virtual_files_are_consistent() -> None:
    view, _ = _view({"f": b"x"}, window=0)
    with pytest.raises(ReadOnly):
        view.open(view.lookup(ROOT_INODE, "f"), write=True)
    state = {"n": 1}
    ino = view.add_virtual_file(".datahub", lambda: b"{}" * state["n"])
    fh = view.open(ino)
    state["n"] = 5  # content changes after the open: the open handle keeps its snapshot
    assert view.read(fh, 0, 100) == b"{}"
    assert [n for n, _, _ in view.readdir(ROOT_INODE, 0, wait=False)] == ["f"]  # found by name, not listed


def test_read_by_inode_serves_what_the_last_stat_reported() -> None:
    """Zero-message opens read by inode: files by their ref, virtual files as last stat'ed."""
    view, source = _view({"a/f": b"0123456789"}, window=0)
    f = view.lookup(view.lookup(ROOT_INODE, "a"), "f")
    assert view.read_inode(f, 2, 5) == b"23456" and view.read_inode(f, 9, 100) == b"9"
    assert view.read_inode(f, 10, 5) == b"" and len(source.requests) == 2
    state = {"n": 1}
    ino = view.add_virtual_file(".datahub", lambda: b"{}" * state["n"])
    first = view.getattr(ino)
    state["n"] = 3  # changed after the kernel learnt the size: reads keep to that content
    assert view.read_inode(ino, 0, 100) == b"{}"
    second = view.getattr(ino)  # a fresh stat shows a new size and a later mtime (the kernel
    assert second.size == 6 and second.mtime_ns > first.mtime_ns  # then drops its cached pages)
    assert view.read_inode(ino, 0, 100) == b"{}{}{}"
    assert view.getattr(ino).mtime_ns == second.mtime_ns  # unchanged content: same mtime
