"""A version mount's namespace, paged from the catalog a directory at a time (paged_tree).

No FUSE here: ``layout.version_view`` over a real SQLite catalog, and the view's calls the
FUSE shim makes. What must hold (issue 38 item 1, docs/fuse.md "The namespace"):

* nothing is listed before a lookup or readdir needs it, and a directory costs one listing;
* the cache stays within its budget however many directories are read;
* an inode number always names the same file, whether or not its page is still cached
  (the kernel and pyfuse3's C lookup table keep numbers after the cache drops them);
* a listing that fails, even part-way, answers EIO (ListingUnavailable), never "absent".
"""

from __future__ import annotations

import errno
import gc
import random
import threading

import pytest

from datahub.catalog import Catalog, Put
from datahub.catalog.model import Record
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import CatalogUnavailable, ListingUnavailable, NotFound
from fuse_adapter import layout
from fuse_adapter.paged_tree import DIR_SHIFT, PagedTree, PagedVersion
from fuse_adapter.readonly import VIRTUAL_BASE, ReadOnlyView
from fuse_adapter.tree import DIR, FILE, ROOT_INODE, ListingTree

DIRS, PER_DIR = 40, 500  # 2 * 10^4 records


class _NoBytes:
    def report_warmup(self, status) -> None: ...


def _key(d: int, f: int) -> str:
    return f"d{d:03}/f{f:04}.jpg"


@pytest.fixture(scope="module")
def catalog_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("paged") / "catalog.db"
    catalog = Catalog(SQLiteCatalogStore(path))
    catalog.create_dataset("big")
    changes = [
        Put(Record(_key(d, f), f"s3://b/{_key(d, f)}", f"e{d}-{f}", d * 1000 + f))
        for d in range(DIRS)
        for f in range(PER_DIR)
    ]
    changes += [Put(Record("top.txt", "s3://b/top.txt", "t", 3)), Put(Record("d001", "s3://b/x", "s", 1))]
    catalog.commit("big", changes)
    catalog.close()
    return f"sqlite:///{path}"


def _view(catalog_url: str, budget: int = 1 << 30) -> tuple[ReadOnlyView, PagedTree, int]:
    from datahub.catalog import open_catalog

    view, loaders, info = layout.version_view(
        lambda: open_catalog(catalog_url),
        [layout.VersionSpec("big", "1")],
        _NoBytes(),
        namespace_bytes=budget,
    )
    tree = view.tree
    assert isinstance(tree, PagedTree) and info.files == DIRS * PER_DIR + 2 and loaders[0].wait(0)
    root = view.lookup(view.lookup(ROOT_INODE, "big"), "v1")
    return view, tree, root


def test_nothing_is_listed_until_needed_then_one_listing_per_directory(catalog_url: str) -> None:
    view, tree, root = _view(catalog_url)
    assert tree.loads == 0  # mounted: the root of the mount lists without the catalog
    assert [e[0] for e in view.readdir(ROOT_INODE, 0, wait=False)] == ["big"]
    assert view.lookup_now(root, "d007") is ...  # not listed yet: the shim waits in a thread
    d7 = view.lookup(root, "d007")
    assert (tree.loads, tree.probes) == (0, 1)  # a subdirectory: one row says so, no listing
    f = view.lookup(d7, "f0042.jpg")
    # "d007/f0042.jpg/" holds nothing, so d007 is listed (a file's number is its position):
    # one listing for the path, never the version root's, never the version's
    assert (tree.loads, tree.probes) == (1, 2)
    assert view.getattr(f).size == 7042 and tree.ref(f).url == "s3://b/d007/f0042.jpg"
    assert tree.key(f) == "d007/f0042.jpg" and tree.ref(f).etag == "e7-42"
    names = [name for name, _ino, _next in view.readdir(d7, 0, wait=True)]
    assert names == [f"f{i:04}.jpg" for i in range(PER_DIR)]
    assert tree.loads == 1
    # the root listed later gives d007 the number its probe gave
    assert [ino for name, ino, _next in view.readdir(root, 0, wait=True) if name == "d007"] == [d7]
    assert tree.loads == 2
    # the file "d001" is shadowed by the directory "d001/" (as in a bucket mount)
    top = [name for name, _ino, _next in view.readdir(root, 0, wait=True)]
    assert top == [f"d{i:03}" for i in range(DIRS)] + ["top.txt"]
    assert tree.attr(view.lookup(root, "d001")).kind == DIR
    assert view.lookup_now(root, "nope") is None


def test_a_name_in_a_directory_not_listed_yet_is_probed_as_a_directory_first(catalog_url: str) -> None:
    view, tree, root = _view(catalog_url)
    # "d001" is a file and a directory: the directory wins before any listing, as after one
    d1 = view.lookup(root, "d001")
    assert tree.attr(d1).kind == DIR and (tree.loads, tree.probes) == (0, 1)
    assert tree.attr(view.lookup(root, "top.txt")).kind == FILE  # a miss lists the root
    assert (tree.loads, tree.probes) == (1, 2)
    with pytest.raises(NotFound):
        view.lookup(root, "nope")  # the root is listed now: absent without a probe
    assert (tree.loads, tree.probes) == (1, 2)
    assert view.lookup(root, "d001") == d1 and tree.stats()["directory_probes"] == 2


def test_a_probe_that_fails_is_eio_never_absent() -> None:
    static = ListingTree(mtime=0)
    root = static.add_dir(ROOT_INODE, "v1")
    listed: list[str] = []

    def fetch(version: PagedVersion, prefix: str):
        listed.append(prefix)
        yield ("k", "s3://b/k", "e", 1, None)

    def has_entries(version: PagedVersion, prefix: str) -> bool:
        raise CatalogUnavailable("the catalog server went away (test)")

    tree = PagedTree(static, fetch, has_entries=has_entries)
    tree.attach(root, PagedVersion("ds", 1, 0), 1)
    with pytest.raises(ListingUnavailable) as caught:
        tree.lookup(root, "sub")
    assert caught.value.errno == errno.EIO and "ds@v1" in str(caught.value) and "'sub/'" in str(caught.value)
    assert listed == []  # nothing was answered from a guess
    assert tree.lookup_now(root, "k") is ...


def test_memory_is_bounded_and_inode_numbers_survive_eviction(catalog_url: str) -> None:
    view, tree, root = _view(catalog_url, budget=200_000)  # a few directory pages
    seen: dict[str, int] = {}
    rng = random.Random(5)
    for d in rng.sample(range(DIRS), 30):
        d_ino = view.lookup(root, f"d{d:03}")
        for name, ino, _next in view.readdir(d_ino, 0, wait=True):
            seen[f"d{d:03}/{name}"] = ino
        assert tree.stats()["page_bytes"] <= tree.budget + 120_000  # the budget and the page being read
    assert tree.stats()["pages"] < 10 and tree.stats()["directory_listings"] >= 30
    # every number the kernel (or the C lookup table) was given still names its file
    for key in rng.sample(sorted(seen), 200):
        ino = seen[key]
        d_ino = ino >> DIR_SHIFT
        assert tree.key(ino) == key
        a = view.getattr(ino)
        d, f = int(key[1:4]), int(key[6:10])
        assert (a.size, tree.ref(ino).etag) == (d * 1000 + f, f"e{d}-{f}")
        assert view.lookup(d_ino, key.split("/")[1]) == ino
    assert view.lookup(root, "d003") == view.lookup(root, "d003")


def test_a_file_inode_whose_page_was_dropped_is_not_resident_until_listed_again(catalog_url: str) -> None:
    view, tree, root = _view(catalog_url, budget=1)  # one page at a time
    d10 = view.lookup(root, "d010")
    f = view.lookup(d10, "f0001.jpg")
    assert tree.resident(f)
    view.lookup(view.lookup(root, "d011"), "f0001.jpg")  # other pages push d010's out
    assert not tree.resident(f) and tree.resident(d10)  # a directory's own attributes: always
    assert view.getattr(d10).mode & 0o040000
    assert tree.resident(VIRTUAL_BASE)  # ``.datahub``: never a page's (its GETATTR once answered ENOENT)
    tree.make_resident(f)  # what the shim does in a thread before answering
    assert tree.resident(f) and view.getattr(f).size == 10001


def _failing_tree(fail: list[int]) -> tuple[PagedTree, int]:
    """A one-version tree whose listings fail after ``fail[0]`` entries while ``fail[0] >= 0``."""
    static = ListingTree(mtime=0)
    root = static.add_dir(ROOT_INODE, "v1")
    entries = [(f"k{i:03}", f"s3://b/k{i:03}", "e", i, None) for i in range(100)]  # DirFile rows

    def fetch(version: PagedVersion, prefix: str):
        for i, entry in enumerate(entries):
            if i == fail[0]:
                raise CatalogUnavailable("the catalog server went away (test)")
            yield entry

    tree = PagedTree(static, fetch)
    tree.attach(root, PagedVersion("ds", 1, 0), len(entries))
    return tree, root


@pytest.mark.parametrize("at", [0, 1, 57, 99])
def test_a_listing_that_fails_part_way_is_eio_never_absent(at: int) -> None:
    fail = [at]
    tree, root = _failing_tree(fail)
    for name in ("k000", "k080", "absent"):  # before, after the failure, and a name not there
        with pytest.raises(ListingUnavailable) as caught:
            tree.lookup(root, name)
        assert caught.value.errno == errno.EIO and "ds@v1" in str(caught.value)
    with pytest.raises(ListingUnavailable):
        tree.readdir(root, 0, wait=True)
    assert tree.lookup_now(root, "k080") is ...  # nothing half-listed was kept
    fail[0] = -1  # the catalog is back: the next lookup lists the directory again
    assert tree.attr(tree.lookup(root, "k080")).kind == FILE
    assert tree.lookup(root, "absent") is None
    assert len(tree.readdir(root, 0, wait=True)) == 100


def test_the_collector_is_held_off_while_listing_and_restored_after() -> None:
    """A listing's row tuples never reach a collection (docs/fuse.md): the cyclic collector is
    off while directories are listed, back on when the last concurrent listing ends (also
    after a failed one), and left off if it was off before."""
    static = ListingTree(mtime=0)
    roots = [static.add_dir(ROOT_INODE, f"v{i}") for i in range(2)]
    inside, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def fetch(version: PagedVersion, prefix: str):
        seen.append(gc.isenabled())
        if version.seq == 0:  # the first listing waits until the second has ended
            inside.set()
            assert release.wait(10)
        if version.seq == 2:
            raise CatalogUnavailable("the catalog server went away (test)")
        yield ("k", "s3://b/k", "e", 1, None)

    tree = PagedTree(static, fetch)
    for i, root in enumerate(roots):
        tree.attach(root, PagedVersion("ds", i, 0), 1)
    assert gc.isenabled()
    first = threading.Thread(target=tree.readdir, args=(roots[0], 0), kwargs={"wait": True})
    first.start()
    try:
        assert inside.wait(10)
        tree.readdir(roots[1], 0, wait=True)  # a second listing, begun and ended meanwhile
        assert not gc.isenabled()  # the first one still runs
    finally:
        release.set()
        first.join(10)
    assert seen == [False, False] and gc.isenabled()
    failing = static.add_dir(ROOT_INODE, "v2")
    tree.attach(failing, PagedVersion("ds", 2, 0), 1)
    with pytest.raises(ListingUnavailable):
        tree.readdir(failing, 0, wait=True)
    assert gc.isenabled()
    later = static.add_dir(ROOT_INODE, "v3")
    tree.attach(later, PagedVersion("ds", 3, 0), 1)
    gc.disable()
    try:
        assert len(tree.readdir(later, 0, wait=True)) == 1 and seen[-1] is False
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()


def _read_ahead_done() -> None:
    """Join the read-ahead threads started so far (each ends once nothing waits for it)."""
    for thread in threading.enumerate():
        if thread.name == "namespace-read-ahead":
            thread.join(30)
            assert not thread.is_alive()


def test_a_walk_in_key_order_has_its_next_directory_read_ahead(catalog_url: str) -> None:
    view, tree, root = _view(catalog_url)
    tree.columns(root, wait=True)
    d = {i: view.lookup(root, f"d{i:03}") for i in (5, 6, 7, 8, 20, 21)}
    tree.columns(d[5], wait=True)
    _read_ahead_done()
    assert (tree.loads, tree.read_aheads) == (2, 0)  # one directory is no walk yet
    tree.columns(d[6], wait=True)  # the one after d005: a walk, d007 is listed meanwhile
    _read_ahead_done()
    assert (tree.loads, tree.read_aheads) == (4, 1) and tree.dir_complete(d[7])
    page = tree.columns(d[7], wait=False)  # no listing now; and d008 is read ahead
    assert page is not None and page.sort_keys[0] == "f0000.jpg" and len(page.sort_keys) == PER_DIR
    _read_ahead_done()
    assert (tree.loads, tree.read_aheads) == (5, 2) and tree.dir_complete(d[8])
    tree.columns(d[20], wait=True)  # a jump: nothing read ahead
    _read_ahead_done()
    assert (tree.loads, tree.read_aheads) == (6, 2) and not tree.dir_complete(d[21])
    assert tree.stats()["directory_read_aheads"] == 2


def test_a_directory_read_ahead_that_fails_is_listed_again_when_read() -> None:
    static = ListingTree(mtime=0)
    root = static.add_dir(ROOT_INODE, "v1")
    failing = {"c/"}
    listed: list[str] = []

    def fetch(version: PagedVersion, prefix: str):
        listed.append(prefix)
        if not prefix:
            yield from ("a/", "b/", "c/")
            return
        yield (f"{prefix}f", f"s3://b/{prefix}f", "e", 1, None)
        if prefix in failing:
            raise CatalogUnavailable("the catalog server went away (test)")

    tree = PagedTree(static, fetch)
    tree.attach(root, PagedVersion("ds", 1, 0), 3)
    a, b, c = (tree.lookup(root, name) for name in "abc")
    tree.columns(a, wait=True)
    tree.columns(b, wait=True)  # reads c ahead (beside b's listing), which fails: nothing is kept
    _read_ahead_done()
    assert sorted(listed) == ["", "a/", "b/", "c/"] and not tree.dir_complete(c)
    with pytest.raises(ListingUnavailable):  # still failing: EIO, never an empty directory
        tree.columns(c, wait=True)
    failing.clear()
    page = tree.columns(c, wait=True)  # the catalog is back: listed again
    assert page is not None and page.sort_keys == ["f"] and listed[-2:] == ["c/", "c/"]
