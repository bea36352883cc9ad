"""ReadOnlyView without FUSE: reads forwarded to the source as they came, virtual files."""

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
    """A ByteSource over in-memory objects that records every request it serves."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.requests: list[tuple[str, int, int, object]] = []
        self._lock = threading.Lock()

    def read(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None, *, reader: object = None
    ) -> bytes:
        with self._lock:
            self.requests.append((ref.url, offset, size or 0, reader))
        data = self.objects[ref.url]
        return data[offset : len(data) if size is None else offset + size]


def _view(objects: dict[str, bytes]) -> tuple[ReadOnlyView, BytesSource]:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b")
    tree.add_files(feed, [(k, len(v), 0, f"memory://b/{k}", "e") for k, v in sorted(objects.items())])
    tree.finish_feed(feed)
    source = BytesSource({f"memory://b/{k}": v for k, v in objects.items()})
    return ReadOnlyView(tree, source), source


def test_the_view_holds_no_read_policy_it_passes_handle_offset_and_size() -> None:
    """Read-ahead belongs to the cache's prefetcher: the view forwards each read as it came
    (clipped to the file), naming the open handle so the prefetcher tells readers apart."""
    data = os.urandom(3 * MiB + 5)
    view, source = _view({"big": data})
    a, b = (view.open(view.lookup(ROOT_INODE, "big")) for _ in range(2))
    out = bytearray()
    while chunk := view.read(a, len(out), 128 * 1024):
        out += chunk
    assert bytes(out) == data
    assert view.read(b, 2 * MiB, 4096) == data[2 * MiB : 2 * MiB + 4096]
    assert view.read(b, 3 * MiB, MiB) == data[3 * MiB :]
    url = "memory://b/big"
    sequential = [(url, off, min(128 * 1024, len(data) - off), a) for off in range(0, len(data), 128 * 1024)]
    assert source.requests == [*sequential, (url, 2 * MiB, 4096, b), (url, 3 * MiB, 5, b)]
    view.release(a)
    view.release(b)
    assert view.open_handles() == 0


def test_write_open_is_refused_and_virtual_files_are_consistent() -> None:
    view, _ = _view({"f": b"x"})
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
    view, source = _view({"a/f": b"0123456789"})
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


class HeldFiles(BytesSource):
    """A source with page files: every file has one (a descriptor of /dev/null), and the hits
    reported for files the C tables answered are recorded."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects)
        self.hits: list[ObjectRef] = []

    def backing_fd(self, ref: ObjectRef, *, verify: bool = True, fetch: bool = False) -> int:
        return os.open(os.devnull, os.O_RDONLY)

    def backing_hits(self, refs: list[ObjectRef]) -> None:
        self.hits += refs


def test_hits_of_files_answered_in_c_name_their_objects(monkeypatch) -> None:
    """The once-a-second fold of opens and READs answered in C: each inode's hit is reported
    with its object's ref, whether its page file was handed out here lately (kept, bounded) or
    long ago (found in the tree again); a virtual file has no object and no hit."""
    import fuse_adapter.readonly as readonly

    monkeypatch.setattr(readonly, "HELD_REFS", 2)
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b")
    names = ["a", "b", "c"]
    tree.add_files(feed, [(k, 1, 0, f"memory://b/{k}", f"etag-{k}") for k in names])
    tree.finish_feed(feed)
    source = HeldFiles({f"memory://b/{k}": b"x" for k in names})
    view = ReadOnlyView(tree, source)
    inos = [view.lookup(ROOT_INODE, k) for k in names]
    for ino in inos:  # published in turn: "a" falls out of the two kept
        os.close(view.backing_fd(ino, verify=False))
    virtual = view.add_virtual_file(".datahub", lambda: b"{}")
    view.backing_hits([inos[2], virtual, inos[0], inos[1]])
    assert source.hits == [ObjectRef(f"memory://b/{k}", f"etag-{k}", 1) for k in ("c", "a", "b")]
