"""review15c: integrity15 through the tree and real mounts.

A readdir that waits past hidden children (``ListingTree.readdir``) when the directory's own
listing fails part-way, or ends with nothing more.

A file shadowed by a directory of its name is hidden; a directory listed by itself may have
only that file final so far. The wait past it must end: with the directory's next child,
with its end, or, when its listing fails, with ListingUnavailable (EIO), never an empty
answer (which ends the directory for the kernel: ENOENT-like, a missing child) and never a
hang.

Two records of one object, the whole and a shorter one, read in turns through a mount in
every read mode, the whole one first.
"""

from __future__ import annotations

import errno
import random
import threading
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.errors import CatalogUnavailable, ListingUnavailable
from fuse_adapter.tree import ROOT_INODE, ListingTree
from tests.fuse.conftest import FuseEnv, polled_stats, upload_dataset, wait_until
from tests.fuse.test_integrity14 import MODES, _read_or_errno


def _shadowed(keys: tuple[str, ...]) -> tuple[ListingTree, int, list[int]]:
    """A tree whose whole listing stopped after ``keys`` (then by directory), the inode of
    ``d`` and the directories asked for."""
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b", name="s3://b")
    tree.add_files(feed, [(k, 1, 0.0, f"memory://b/{k}", "e") for k in keys])
    asked: list[int] = []
    tree.list_by_directory(feed, lambda ino, relpath: asked.append(ino))
    assert tree.lookup_now(ROOT_INODE, "d") is ...  # the root is listed by itself: asked for
    tree.add_listed(ROOT_INODE, ["d"], done=True)
    d = tree.lookup(ROOT_INODE, "d", timeout=60)
    assert d is not None
    return tree, d, asked


def _readdir_in_thread(tree: ListingTree, d: int) -> tuple[threading.Thread, list[object]]:
    got: list[object] = []

    def run() -> None:
        try:
            got.append(tree.readdir(d, 0, wait=True))
        except ListingUnavailable as exc:
            got.append(exc)

    waiter = threading.Thread(target=run, daemon=True)
    waiter.start()
    return waiter, got


def _wait_asked(asked: list[int], d: int) -> None:
    for _ in range(6000):
        if d in asked:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"directory {d} was never asked for")


def test_a_readdir_past_a_hidden_child_is_eio_when_the_directorys_listing_fails() -> None:
    """d/a is a file shadowed by the directory d/a/ (the whole listing stopped inside it):
    the only final child of d is hidden. d's own listing then fails: the waiting readdir ends
    with ListingUnavailable (EIO), not an empty answer; asked again, the listing is asked
    for again and the directory a is listed."""
    tree, d, asked = _shadowed(("d/a", "d/a/x"))
    waiter, got = _readdir_in_thread(tree, d)
    _wait_asked(asked, d)
    tree.add_listed(d, [], error=CatalogUnavailable("the bucket did not answer"))
    waiter.join(timeout=60)
    assert not waiter.is_alive(), "readdir still waiting after the directory's listing failed"
    assert len(got) == 1 and isinstance(got[0], ListingUnavailable), got
    before = len(asked)
    waiter, got = _readdir_in_thread(tree, d)
    for _ in range(6000):
        if len(asked) > before:
            break
        threading.Event().wait(0.01)
    assert len(asked) > before, "the failed listing was not asked for again"
    tree.add_listed(d, ["a", ("b", 1, 0.0, "memory://b/d/b", "e")], done=True)
    waiter.join(timeout=60)
    assert len(got) == 1 and not isinstance(got[0], ListingUnavailable), got
    assert [name for name, _ino, _next in got[0]] == ["a", "b"]


def test_a_readdir_past_a_hidden_child_ends_when_the_directory_ends() -> None:
    """The same hidden file, and d's own listing ends having only the directory a to add
    (the whole listing had it): the readdir answers a, then the end; it never hangs."""
    tree, d, asked = _shadowed(("d/a", "d/a/x"))
    waiter, got = _readdir_in_thread(tree, d)
    _wait_asked(asked, d)
    tree.add_listed(d, ["a"], done=True)
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    assert [name for name, _ino, _next in got[0]] == ["a"]
    (_name, _ino, nxt) = got[0][-1]
    assert tree.readdir(d, nxt, wait=True) == []


@pytest.mark.fuse
@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_whole_record_read_first_then_a_short_record_of_its_object_in_turns(
    env: FuseEnv, mode: str
) -> None:
    """integrity15's mount test reads the short record first. Here the record that names the
    object whole is read first (its page files written, a one-page file's published to C or
    handed to the kernel for passthrough), then the short record and the whole one in turns:
    the short one fails with ESTALE every time (the whole record's page has another length),
    and the whole one reads its bytes every time (a short read's check of the page file may
    remove it: the whole record then fetches it again, never reads the short length)."""
    rng = random.Random(1515)
    objects = {"train/small.bin": rng.randbytes(70_000), "train/long.bin": rng.randbytes(6 * 1024**2 + 3)}
    claims = {"train/small.bin": 60_001, "train/long.bin": 5 * 1024**2 + 1}
    whole = upload_dataset(env, "whole", objects)
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        records = [catalog.get_record(whole.name, str(whole.seq), key) for key in objects]
        catalog.create_dataset("short")
        puts = [Put(Record(r.key, r.url, r.etag, claims[r.key])) for r in records]
        seq = catalog.commit("short", puts, message="sizes shorter than the objects").seq
    finally:
        catalog.close()
    mnt = env.mountpoint("turns")
    with env.mounted(mnt, "whole", "short", *MODES[mode]):
        for _ in range(3):
            for key, data in objects.items():
                assert _read_or_errno(mnt / "whole" / f"v{whole.seq}" / key) == data, key
                assert _read_or_errno(mnt / "short" / f"v{seq}" / key) == errno.ESTALE, key


def _page_files(env: FuseEnv) -> dict[str, int]:
    """The disk tier's page files and their inodes (a removed and refetched file is another)."""
    pages = Path(env.config.resolved_disk_dir) / "pages"
    return {str(p.relative_to(pages)): p.stat().st_ino for p in pages.rglob("*.page")}


@pytest.mark.fuse
@pytest.mark.parametrize("mode", ["auto", "passthrough", "no-passthrough"])
def test_a_record_claiming_the_wrong_size_leaves_the_objects_page_file_alone(env: FuseEnv, mode: str) -> None:
    """caller31: the whole record's one-page file is read first (its page file written and
    verified, published or handed to the kernel); records of the same object claiming a
    shorter and a longer size then fail with ESTALE (ObjectChanged) at every open, and the
    object's page file is never removed nor counted corrupt: the same inode throughout, and
    the whole record still reads it once the origin's object is gone (before, each open of a
    wrong record removed the good file as corrupt)."""
    data = random.Random(3131).randbytes(70_000)
    whole = upload_dataset(env, "whole", {"small.bin": data})
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        record = catalog.get_record(whole.name, str(whole.seq), "small.bin")
        catalog.create_dataset("wrong")
        puts = [Put(Record(f"{claim}.bin", record.url, record.etag, claim)) for claim in (60_001, 80_000)]
        seq = catalog.commit("wrong", puts, message="sizes other than the object's").seq
    finally:
        catalog.close()
    mnt = env.mountpoint("sizeclaim")
    with env.mounted(mnt, "whole", "wrong", *MODES[mode]):
        assert _read_or_errno(mnt / "whole" / f"v{whole.seq}" / "small.bin") == data
        wait_until(lambda: len(_page_files(env)) == 1, 60)
        before = _page_files(env)
        for _ in range(3):
            for claim in (60_001, 80_000):
                assert _read_or_errno(mnt / "wrong" / f"v{seq}" / f"{claim}.bin") == errno.ESTALE, claim
            assert _page_files(env) == before, "the object's good page file was removed"
            assert _read_or_errno(mnt / "whole" / f"v{whole.seq}" / "small.bin") == data
        stats = polled_stats(env)
        assert all(row.get("corrupt", 0) == 0 for row in stats["tiers"]), stats["tiers"]
        assert all(row.get("rejected", 0) == 0 for row in stats["backing_files"]), stats["backing_files"]
        env.endpoint.client().delete_object(Bucket=env.bucket, Key=record.url.split("/", 3)[3])
    with env.mounted(mnt, "whole", *MODES[mode]):  # a new daemon: only the disk tier has the bytes
        assert _read_or_errno(mnt / "whole" / f"v{whole.seq}" / "small.bin") == data
    assert _page_files(env) == before
