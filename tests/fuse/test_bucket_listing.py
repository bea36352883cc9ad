"""A bucket listed by directory (issue 27) shows exactly what the whole listing shows.

Without FUSE: a real in-memory object store (its ``list_dir`` is the base class's roll-up)
and a real SQLite catalog, the ``BucketLister`` of a mount, and lookups and readdirs as
the FUSE handlers make them. Behaviour only: waits have generous guards.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.catalog import open_catalog
from datahub.errors import AlreadyExists
from datahub.storage.memory import MemoryStore, drop_memory_space
from fuse_adapter.bucket_listing import BucketLister
from fuse_adapter.layout import MountInfo
from fuse_adapter.tree import ROOT_INODE, ListingTree

GUARD = 60.0
_spaces = itertools.count()
_CATALOG_DIR = tempfile.TemporaryDirectory(prefix="bylist-")  # one per module: hypothesis reruns
CATALOG = f"sqlite:///{_CATALOG_DIR.name}/catalog.db"

keys_strategy = st.sets(
    st.lists(st.sampled_from(["a", "b", "a.b", "a-", "ab", "0", "é"]), min_size=1, max_size=4).map("/".join),
    min_size=1,
)


class CountingStore(MemoryStore):
    """Counts listing calls by kind (a real memory store otherwise)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.calls: list[tuple[str, str]] = []
        self._rolling_up = threading.local()  # list_dir's own list() call is not counted twice

    def list(self, prefix: str = "", start_after: str = ""):  # type: ignore[override]
        if not getattr(self._rolling_up, "on", False):
            self.calls.append(("list", prefix))
        return super().list(prefix, start_after)

    def list_dir(self, prefix: str = "", start_after: str = ""):  # type: ignore[override]
        self.calls.append(("list_dir", prefix))
        self._rolling_up.on = True
        try:
            yield from super().list_dir(prefix, start_after)
        finally:
            self._rolling_up.on = False


def _start(
    keys: set[str], whole_max: int, catalog_url: str
) -> tuple[ListingTree, BucketLister, CountingStore]:
    store = CountingStore(f"bylist-{next(_spaces)}")
    for k in sorted(keys):
        store.put(k, k.encode())
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, store.url_for(""))
    catalog = open_catalog(catalog_url)
    try:
        catalog.create_dataset("s3.x", source=store.root_url)  # as the mount makes it
    except AlreadyExists:
        pass
    finally:
        catalog.close()
    lister = BucketLister(
        tree, feed, store, MountInfo(source=store.root_url), lambda: open_catalog(catalog_url), "s3.x", store.root_url,
        whole_max=whole_max,
    )  # fmt: skip
    threading.Thread(target=lister.run, daemon=True).start()
    return tree, lister, store


def _names(tree: ListingTree, ino: int) -> list[tuple[str, int]]:
    """Every child of a directory, as readdir shows it once complete (waits for its listing)."""
    deadline = time.monotonic() + GUARD
    tree.readdir(ino, 0)  # a readdir asks for the directory's listing
    while not tree.dir_complete(ino):
        assert time.monotonic() < deadline, "directory never complete"
        time.sleep(0.001)
    return [(name, child) for name, child, _ in tree.readdir(ino, 0)]


def _walk(tree: ListingTree, ino: int = ROOT_INODE, prefix: str = "") -> Iterator[tuple[str, int]]:
    for name, child in _names(tree, ino):
        if tree.is_dir(child):
            yield from _walk(tree, child, f"{prefix}{name}/")
        else:
            yield f"{prefix}{name}", child


def _visible(keys: set[str]) -> set[str]:
    dirs = {k[:i] for k in keys for i in range(len(k)) if k[i] == "/"}
    return {k for k in keys if k not in dirs}  # a directory shadows a file of its name


@settings(max_examples=60, deadline=None)
@given(keys_strategy, st.integers(min_value=1, max_value=12), st.data())
def test_lookups_and_readdirs_by_directory_equal_the_whole_listing(
    keys: set[str], whole_max: int, data: st.DataObject
) -> None:
    tree, lister, store = _start(keys, whole_max, CATALOG)
    try:
        visible = _visible(keys)
        # lookups first, in a random order, each asking only for the directories on its path
        for key in data.draw(st.permutations(sorted(visible))):
            parent = ROOT_INODE
            for part in key.split("/"):
                parent = tree.lookup(parent, part, timeout=GUARD)
                assert parent is not None, key
            ref = tree.ref(parent)
            assert (ref.url, ref.size, tree.key(parent)) == (store.url_for(key), len(key.encode()), key)
            assert ref.etag == store.stat(key).etag
        assert tree.lookup(ROOT_INODE, "zz-absent", timeout=GUARD) is None
        listed = dict(_walk(tree))
        assert set(listed) == visible
        if len(keys) > whole_max:  # listed by directory: one list_dir per directory at most
            dirs = [p for kind, p in store.calls if kind == "list_dir"]
            assert len(dirs) == len(set(dirs))
    finally:
        lister.stop()
        drop_memory_space(store.name)


def test_a_reader_of_one_file_lists_only_the_directories_on_its_path() -> None:
    keys = {f"d{i:02d}/o{j:03d}" for i in range(20) for j in range(50)}
    tree, lister, store = _start(keys, 100, CATALOG)
    try:
        d07 = tree.lookup(ROOT_INODE, "d07", timeout=GUARD)
        assert d07 is not None
        one = tree.lookup(d07, "o042", timeout=GUARD)
        assert one is not None and tree.key(one) == "d07/o042"
        assert store.calls == [("list", ""), ("list_dir", ""), ("list_dir", "d07/")]
        # the whole listing stopped inside d02: its first keys are not listed again
        d02 = tree.lookup(ROOT_INODE, "d02", timeout=GUARD)
        assert [n for n, _ in _names(tree, d02)] == [f"o{j:03d}" for j in range(50)]
    finally:
        lister.stop()
        drop_memory_space(store.name)


def test_the_whole_listing_is_taken_and_committed_only_when_asked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    keys = {f"d{i}/o{j}" for i in range(5) for j in range(30)}
    tree, lister, store = _start(keys, 10, url)
    try:
        assert tree.lookup(ROOT_INODE, "d1", timeout=GUARD) is not None
        catalog = open_catalog(url)
        try:
            with pytest.raises(Exception):  # noqa: B017 -- no version yet: nothing partial committed
                catalog.resolve("s3.x", None)
        finally:
            catalog.close()
        lister.want_whole()
        deadline = time.monotonic() + GUARD
        while lister.version is None:
            assert time.monotonic() < deadline, "the whole listing was never committed"
            time.sleep(0.01)
        assert sorted(r.url for r in lister.files()) == sorted(store.url_for(k) for k in keys)
        assert lister.version.record_count == len(keys)
    finally:
        lister.stop()
        drop_memory_space(store.name)
