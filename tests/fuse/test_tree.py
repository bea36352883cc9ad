"""The listing index without FUSE: lookups, readdir order, incremental finality, conflicts."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuse_adapter.tree import DIR, FILE, ROOT_INODE, ListingTree


def _load(keys: list[str], base: str = "memory://b") -> tuple[ListingTree, object]:
    tree = ListingTree(mtime=1000.0)
    feed = tree.start_feed(ROOT_INODE, base)
    tree.add_files(feed, [(k, len(k), 2000.0, f"{base}/{k}", f"etag-{k}") for k in sorted(keys)])
    tree.finish_feed(feed)
    return tree, feed


def _walk(tree: ListingTree, ino: int = ROOT_INODE, prefix: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    for name, child, _ in tree.readdir(ino, 0):
        path = f"{prefix}{name}"
        if tree.is_dir(child):
            out.update(_walk(tree, child, path + "/"))
        else:
            out[path] = child
    return out


def test_lookup_attr_and_ref() -> None:
    tree, _ = _load(["train/cat/1.jpg", "train/cat/2.jpg", "train/dog/1.jpg", "README"])
    train = tree.lookup(ROOT_INODE, "train")
    assert train is not None and tree.attr(train).kind == DIR
    cat = tree.lookup(train, "cat")
    one = tree.lookup(cat, "1.jpg")
    assert tree.attr(one).kind == FILE and tree.attr(one).size == len("train/cat/1.jpg")
    assert tree.attr(one).mtime_ns == 2000 * 10**9
    assert tree.key(one) == "train/cat/1.jpg"
    ref = tree.ref(one)
    assert (ref.url, ref.etag, ref.size) == ("memory://b/train/cat/1.jpg", "etag-train/cat/1.jpg", 15)
    assert tree.lookup(cat, "3.jpg") is None
    assert tree.lookup(ROOT_INODE, "README") is not None


def test_urls_outside_the_base_are_kept() -> None:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "s3://a/p")
    tree.add_files(feed, [("k1", 1, 0, "s3://a/p/k1", "e1"), ("k2", 2, 0, "s3://other/x", "e2")])
    tree.finish_feed(feed)
    assert tree.ref(tree.lookup(ROOT_INODE, "k1")).url == "s3://a/p/k1"
    assert tree.ref(tree.lookup(ROOT_INODE, "k2")).url == "s3://other/x"


@settings(max_examples=60, deadline=None)
@given(
    st.sets(
        st.lists(st.sampled_from(["a", "b", "a.b", "a-", "ab", "0", "é"]), min_size=1, max_size=4).map(tuple)
    )
)
def test_tree_equals_listing(paths: set[tuple[str, ...]]) -> None:
    keys = {"/".join(p) for p in paths}
    # a key that is also a directory prefix of another key is shadowed by the directory
    dirs = {k[:i] for k in keys for i in range(len(k)) if k[i] == "/"}
    visible = {k for k in keys if k not in dirs}
    tree, feed = _load(list(keys))
    listed = _walk(tree)
    assert set(listed) == visible
    assert feed.files == len(visible) and feed.shadowed == len(keys) - len(visible)
    for key, ino in listed.items():
        parent = ROOT_INODE
        for part in key.split("/")[:-1]:
            parent = tree.lookup(parent, part)
        assert tree.lookup(parent, key.rsplit("/", 1)[-1]) == ino
        assert tree.key(ino) == key
    assert [k for k, _, _ in tree.walk_files(ROOT_INODE)] == sorted(visible)


def test_incremental_lookup_waits_until_final() -> None:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b")
    tree.add_files(feed, [("a/1", 1, 0, "memory://b/a/1", "e")])
    assert tree.lookup_now(ROOT_INODE, "a") is ...  # "a/2" could still come
    assert tree.lookup_now(ROOT_INODE, "0") is None  # sorts before the cursor: final
    assert tree.readdir(ROOT_INODE, 0) == []  # "a" is not final yet
    result: list[object] = []
    waiter = threading.Thread(target=lambda: result.append(tree.lookup(ROOT_INODE, "z")))
    waiter.start()
    tree.add_files(feed, [("b", 1, 0, "memory://b/b", "e")])
    assert [n for n, _, _ in tree.readdir(ROOT_INODE, 0)] == ["a"]
    assert tree.dir_complete(tree.lookup(ROOT_INODE, "a"))
    assert not tree.dir_complete(ROOT_INODE)
    tree.finish_feed(feed)
    waiter.join(timeout=60)
    assert result == [None]
    assert [n for n, _, _ in tree.readdir(ROOT_INODE, 0, wait=True)] == ["a", "b"]


def test_out_of_order_listing_is_refused() -> None:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "")
    tree.add_files(feed, [("b", 1, 0, "u", "e")])
    with pytest.raises(ValueError):
        tree.add_files(feed, [("a", 1, 0, "u", "e")])


def test_memory_per_entry_is_compact() -> None:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "s3://bucket")
    n = 100_000
    batch = []
    for i in range(n):
        key = f"train/class_{i % 50:03d}/img_{i:07d}.jpg"
        batch.append((key, 100_000, 0.0, f"s3://bucket/{key}", f'"{i:032x}"'))
    batch.sort()
    tree.add_files(feed, batch)
    tree.finish_feed(feed)
    assert tree.nbytes() / n < 200
