"""A listing that fails part-way: names past it are unknown, never absent (chaos soak, seed 26).

The soak killed the catalog service while a remounted daemon loaded its versions' listings;
the load gave up after its client's retries, the feed was marked done, and for the rest of
the run every lookup past the failure answered ENOENT for files the versions hold (1,766
reads on node b). Now a failed load marks the names past its cursor unknown (EIO), and the
loader resumes from the cursor until the listing is whole.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.catalog.model import Record
from datahub.errors import CatalogUnavailable, ListingUnavailable
from fuse_adapter import listing_load
from fuse_adapter.listing_load import load_records
from fuse_adapter.mount_info import MountInfo
from fuse_adapter.tree import ROOT_INODE, ListingTree


def _add(tree: ListingTree, feed, *keys: str) -> None:
    tree.add_files(feed, [(k, 1, 0.0, f"memory://b/{k}", "e") for k in keys])


def test_lookup_past_a_failed_listing_is_eio_not_enoent() -> None:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b", name="src@v3")
    _add(tree, feed, "a/1", "b")
    waiter_got: list[object] = []

    def wait_for_z() -> None:
        try:
            waiter_got.append(tree.lookup(ROOT_INODE, "z"))
        except ListingUnavailable as exc:
            waiter_got.append(exc)

    waiter = threading.Thread(target=wait_for_z)
    waiter.start()
    tree.fail_feed(feed, CatalogUnavailable("the catalog server did not answer"))
    waiter.join(timeout=60)
    assert len(waiter_got) == 1 and isinstance(waiter_got[0], ListingUnavailable)
    assert "src@v3" in str(waiter_got[0]) and "not absent" in str(waiter_got[0])
    assert waiter_got[0].errno != 2  # EIO, not ENOENT
    with pytest.raises(ListingUnavailable):
        tree.lookup_now(ROOT_INODE, "c")
    with pytest.raises(ListingUnavailable):
        tree.readdir(ROOT_INODE, 2, wait=True)  # past "a" and "b": unknown
    assert tree.lookup_now(ROOT_INODE, "a") is not None  # before the cursor: still answered
    assert tree.lookup_now(ROOT_INODE, "0") is None  # sorts before the cursor: truly absent
    _add(tree, feed, "c")  # the retry makes progress: lookups wait for it again
    assert tree.lookup_now(ROOT_INODE, "z") is ...
    tree.finish_feed(feed)
    assert tree.lookup(ROOT_INODE, "c") is not None
    assert tree.lookup(ROOT_INODE, "z") is None  # now truly absent


def _records(keys: list[str]) -> list[Record]:
    return [Record(k, f"memory://b/{k}", "e", len(k)) for k in keys]


@settings(max_examples=40, deadline=None)
@given(
    keys=st.sets(st.from_regex(r"[a-c]{1,2}(/[a-c]{1,2}){0,2}", fullmatch=True), min_size=1, max_size=40),
    fail_at=st.lists(st.integers(min_value=0, max_value=45), max_size=4),
)
def test_a_load_that_fails_anywhere_ends_whole(keys: set[str], fail_at: list[int]) -> None:
    """Whatever records the listing fails at (any number of times), the loader ends with the
    tree holding exactly the listing, each key once."""
    # a key that is also a directory of another key is shadowed by the tree: keep leaves only
    leaves = sorted(k for k in keys if not any(o.startswith(k + "/") for o in keys))
    pending = sorted(set(fail_at))
    calls: list[str] = []

    def records_after(cursor: str) -> Iterator[Record]:
        calls.append(cursor)
        for r in _records(leaves):
            if r.key <= cursor:
                continue
            if pending and leaves.index(r.key) >= pending[0]:  # each planned failure once
                pending.pop(0)
                raise CatalogUnavailable("the catalog server did not answer")
            yield r

    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b", name="ds@v1")
    info = MountInfo(source="ds@v1")
    old = listing_load.RETRY_FIRST
    listing_load.RETRY_FIRST = 0.0
    try:
        assert load_records(tree, feed, records_after, 0.0, info)
    finally:
        listing_load.RETRY_FIRST = old
    assert feed.done and feed.error is None and info.error == ""
    assert sorted(key for key, _ref, _m in tree.walk_files(ROOT_INODE)) == leaves
    assert info.files == len(leaves)
    assert calls[0] == "" and calls == sorted(calls)  # each retry resumed from the cursor


def test_a_directory_listing_that_failed_is_asked_for_again() -> None:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b", name="s3://b")
    _add(tree, feed, "a/1")  # the whole listing stopped here: "a" may hold more
    asked: list[int] = []
    tree.list_by_directory(feed, lambda ino, relpath: asked.append(ino))
    assert tree.lookup_now(ROOT_INODE, "a") is ...  # the root is listed by itself: asked for
    assert asked == [ROOT_INODE]
    tree.add_listed(ROOT_INODE, ["a"], done=True)
    d = tree.lookup(ROOT_INODE, "a", timeout=60)
    assert d is not None
    got: list[object] = []

    def look() -> None:
        try:
            got.append(tree.lookup(d, "2", timeout=60))
        except ListingUnavailable as exc:
            got.append(exc)

    waiter = threading.Thread(target=look)
    waiter.start()
    for _ in range(6000):
        if asked[-1] == d:
            break
        threading.Event().wait(0.01)
    assert asked[-1] == d
    tree.add_listed(d, [], error=CatalogUnavailable("the bucket did not answer"))
    waiter.join(timeout=60)
    assert len(got) == 1 and isinstance(got[0], ListingUnavailable)
    assert "not absent" in str(got[0])
    before = len(asked)
    assert tree.lookup_now(d, "2") is ...  # asked for again, not ENOENT
    assert len(asked) == before + 1
    tree.add_listed(d, [("2", 1, 0.0, "memory://b/a/2", "e")], done=True)
    assert tree.lookup(d, "2", timeout=60) is not None
    assert tree.lookup(d, "3", timeout=60) is None
