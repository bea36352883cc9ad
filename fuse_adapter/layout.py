"""What a read-only mount shows, and the loader threads that fill its listing index.

Two layouts:

* dataset versions: ``MOUNT/<dataset>/v<seq>/<key>``; every ref is resolved once, at
  mount time, and the path shows the number. A ref that is not a plain number
  (``latest``, a tag) becomes a symlink next to it: ``MOUNT/<dataset>/latest -> v7``.
* a bucket snapshot: ``MOUNT/<key>`` plus a generated ``MOUNT/.datahub`` (JSON) naming
  the dataset version the mount is a snapshot of.

Mounting a bucket records which objects the job saw: every mount lists the bucket itself,
with its own credentials (incrementally; the mount is browsable while it runs), and commits
the listing as the next version of dataset ``s3.<bucket>[.<prefix>]``. It never shows an
earlier version of that dataset instead: any API token may create a dataset of that name
and commit records naming other objects, which a mount reusing it would read as the
bucket's files. Nor does it commit into a dataset of that name made otherwise than mounts
make it (no owner, no access list, the mount's URL as its source): its owner would read
this mount's listing of a bucket they may not list (``bucket_listing.foreign_snapshot``);
the listing is then served unrecorded. A large bucket is listed by directory instead and
its snapshot is taken only once readers open many files (``bucket_listing``).
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from datahub.catalog.model import DirFile, Version
from datahub.catalog.snapshots import snapshot_dataset_name
from datahub.errors import AccessDenied, AlreadyExists, Busy, DatahubError, NotFound, TransientStorageError
from datahub.storage.base import ObjectInfo, ObjectRef
from datahub.validation import split_version, version_number
from fuse_adapter.bucket_listing import BucketLister
from fuse_adapter.mount_info import INFO_FILE, MountInfo
from fuse_adapter.paged_tree import PAGE_BUDGET, PagedTree, PagedVersion
from fuse_adapter.readonly import ReadOnlyView
from fuse_adapter.source import ByteSource
from fuse_adapter.tree import ROOT_INODE, Feed, ListingTree

log = logging.getLogger(__name__)


CatalogFactory = Callable[[], object]  # -> datahub.catalog.Catalog (one per loader thread)


@dataclass(frozen=True)
class VersionSpec:
    dataset: str
    ref: str | None  # as the user wrote it; None = latest

    @classmethod
    def parse(cls, text: str) -> VersionSpec:
        return cls(*split_version(text))  # "ds@" is refused, not taken for latest

    def entry(self) -> str:
        """Where this spec's files are under ``MOUNT/<dataset>/``, known before the ref is
        resolved: ``v<seq>`` for a number, else the ref itself (a symlink to ``v<seq>``)."""
        alias = self.ref or "latest"
        number = alias.removeprefix("v")  # one "v": ``vv3`` is a tag (review73)
        # ``v03`` is version 3, laid out as ``v3`` (review73: the path shown was ``v03``)
        return f"v{version_number(number)}" if number.isascii() and number.isdigit() else alias


@dataclass
class Loader:
    """One mounted listing; ``wait()`` returns once it is in the tree (or failed).

    A version mount has no load to wait for (``thread`` None: its namespace is paged from
    the catalog, ``paged_tree``) and knows its totals from the version (``counts``)."""

    name: str
    thread: threading.Thread | None
    feed: Feed | None
    #: every object of the listing, once it is in (streamed)
    files: Callable[[], Iterator[ObjectRef]]
    #: a bucket listed by directory: take the whole listing (the snapshot) now
    want_whole: Callable[[], None] | None = None
    counts: tuple[int, int] | None = None  # (objects, bytes) when known without the feed

    def wait(self, timeout: float | None = None) -> bool:
        if self.thread is None:
            return True
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def totals(self) -> tuple[int, int]:
        """(objects, bytes) of the listing."""
        if self.counts is not None:
            return self.counts
        assert self.feed is not None
        return self.feed.files, self.feed.bytes


def _start(name: str, target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, name=f"datahub-load-{name}", daemon=True)
    thread.start()
    return thread


def version_view(
    catalog_factory: CatalogFactory,
    specs: list[VersionSpec],
    source: ByteSource,
    *,
    uid: int | None = None,
    gid: int | None = None,
    namespace_bytes: int = PAGE_BUDGET,
) -> tuple[ReadOnlyView, list[Loader], MountInfo]:
    """``MOUNT/<dataset>/v<seq>/…`` for each spec; refs resolved now. Each version's
    namespace is paged from the catalog a directory at a time into a cache of
    ``namespace_bytes`` (``paged_tree``): the mount is ready at once, whatever its size."""
    # kept open for the mount's life: every directory listing shares it (the stores are
    # thread-safe; SQLite's few pooled connections bound the page caches, not the threads)
    catalog = catalog_factory()
    try:
        resolved: list[tuple[VersionSpec, Version]] = [(s, catalog.resolve(s.dataset, s.ref)) for s in specs]
    except BaseException:
        catalog.close()
        raise
    tree = ListingTree(mtime=time.time())
    info = MountInfo(source=" ".join(f"{s.dataset}@{s.ref or 'latest'}" for s in specs))
    dataset_dirs: dict[str, int] = {}
    mounted: dict[tuple[str, int], int] = {}
    links: set[tuple[str, str]] = set()
    loaders: list[Loader] = []
    # static part first (it is not fed by a listing): dataset dirs, version dirs, ref symlinks
    for spec, version in sorted(resolved, key=lambda sv: (sv[0].dataset, sv[1].seq)):
        ds = dataset_dirs.get(spec.dataset)
        if ds is None:
            ds = dataset_dirs[spec.dataset] = tree.add_dir(ROOT_INODE, spec.dataset)
        vname = f"v{version.seq}"
        if (spec.dataset, version.seq) not in mounted:
            mounted[spec.dataset, version.seq] = tree.add_dir(ds, vname, mtime=version.created_at)
            info.versions.append(f"{spec.dataset}@{vname}")
    for spec, _version in resolved:
        alias = spec.entry()
        if (
            alias.startswith("v")
            and alias[1:].isascii()
            and alias[1:].isdigit()
            or (spec.dataset, alias) in links
        ):
            continue
        links.add((spec.dataset, alias))
    for dataset, alias in sorted(links):
        target = next(
            f"v{v.seq}" for s, v in resolved if s.dataset == dataset and (s.ref or "latest") == alias
        )
        tree.add_symlink(dataset_dirs[dataset], alias, target)
    tree.sort_static_dir(ROOT_INODE)
    for ds in dataset_dirs.values():
        tree.sort_static_dir(ds)

    def fetch(version: PagedVersion, prefix: str) -> Iterator[DirFile | str]:
        return catalog.list_directory(version.dataset, version.seq, prefix=prefix)

    def has_entries(version: PagedVersion, prefix: str) -> bool:
        listing = catalog.list_directory(version.dataset, version.seq, prefix=prefix, limit=1)
        return next(iter(listing), None) is not None

    paged = PagedTree(tree, fetch, budget_bytes=namespace_bytes, has_entries=has_entries)
    for (dataset, seq), root in mounted.items():
        version = next(v for _, v in resolved if v.dataset == dataset and v.seq == seq)
        paged.attach(root, PagedVersion(dataset, seq, int(version.created_at * 1e9)), version.record_count)
        loaders.append(_paged_loader(catalog_factory, version))
        info.files += version.record_count
        info.bytes += version.total_bytes
    view = ReadOnlyView(paged, source, uid=uid, gid=gid)  # type: ignore[arg-type]
    view.on_hint = info.count_hint
    view.add_virtual_file(INFO_FILE, info.to_json)
    log.info("mounting %s", ", ".join(info.versions))
    return view, loaders, info


#: records per catalog query of a warm-up's stream (a fresh keyset query each, no long cursor)
FILES_PAGE = 10_000


def _paged_loader(catalog_factory: CatalogFactory, version: Version) -> Loader:
    name = f"{version.dataset}@v{version.seq}"

    def files() -> Iterator[ObjectRef]:
        """The version's objects in key order, streamed from the catalog a page at a time:
        the warm-up holds no object per file and needs no namespace in memory."""
        catalog = catalog_factory()
        try:
            after = ""
            while True:
                page = list(
                    catalog.list_records(version.dataset, version.seq, start_after=after, limit=FILES_PAGE)
                )
                yield from (ObjectRef(r.url, r.etag, r.size) for r in page)
                if len(page) < FILES_PAGE:
                    return
                after = page[-1].key
        finally:
            catalog.close()

    return Loader(name, None, None, files, counts=(version.record_count, version.total_bytes))


# --- direct bucket mounts --------------------------------------------------------------------------
def bucket_view(
    url: str,
    stores,  # datahub.storage.StoreRegistry
    catalog_factory: CatalogFactory,
    source: ByteSource,
    *,
    whole_max: int = 0,
    on_by_directory: Callable[[], None] | None = None,
    uid: int | None = None,
    gid: int | None = None,
    record: bool = True,
    shared: bool = False,
) -> tuple[ReadOnlyView, list[Loader], MountInfo]:
    """``MOUNT/<key>`` of a bucket prefix, listed by this mount, committed as a new snapshot
    when the dataset of its name is one mounts make (made here when missing). ``record``
    false (``--no-snapshot``): the listing is served and committed nowhere, nothing is made.
    ``shared`` (``--allow-other``: a CSI volume's pods): ``.datahub`` says nothing only the
    mount's catalog credentials may read (``BucketLister``).

    The listing is the bucket's own, read with the mount's credentials: an existing version
    of the snapshot dataset is never shown instead (the module's docstring says why). It is
    whole up to ``whole_max`` keys (0: no limit); past that, directory by directory
    (``bucket_listing``; ``on_by_directory`` is told)."""
    scheme, sep, rest = url.partition("://")
    url = f"{scheme.lower()}{sep}{rest}"  # the snapshot's name is in lower case, so is its source
    dataset = snapshot_dataset_name(url)
    store = stores.store(url)
    first = first_listing(store, url)  # before the snapshot dataset is made: a refusal makes nothing
    if record:
        catalog = catalog_factory()
        try:
            try:
                catalog.create_dataset(dataset, description=f"snapshots of {url} taken by mounts", source=url)
            except AlreadyExists:
                pass
        finally:
            catalog.close()
    tree = ListingTree(mtime=time.time())
    view = ReadOnlyView(tree, source, uid=uid, gid=gid)
    info = MountInfo(source=url)
    view.on_hint = info.count_hint
    view.add_virtual_file(INFO_FILE, info.to_json)
    info.state = "listing"
    feed = tree.start_feed(ROOT_INODE, store.url_for(""), name=url)
    lister = BucketLister(
        tree, feed, store, info, catalog_factory, dataset, url,
        whole_max=whole_max, on_by_directory=on_by_directory, first=first, record=record, shared=shared,
    )  # fmt: skip
    log.info("mounting %s: listing it for a new snapshot of dataset %s", url, dataset)
    loader = Loader(dataset, _start(dataset, lister.run), feed, lister.files, lister.want_whole)
    return view, [loader], info


def first_listing(store, url: str) -> Iterator[ObjectInfo] | None:
    """The bucket's listing with its first page already fetched, in the caller's thread.

    Why: a bucket mount used to list only in its loader thread, after it was mounted, so a
    bucket that does not exist, or that the mount's credentials may not list (or no
    credentials at all), gave a mount that looked fine and showed an empty directory whose
    every lookup failed (EIO), retried forever; ``datahub mount --background`` said
    "mounted". A refusal no retry can mend now fails the mount at once (the error names
    the bucket, the endpoint and what to do), and nothing is made (no snapshot dataset).

    The answer is not thrown away: the returned iterator goes on from that first page
    (``BucketLister(first=...)``), so a mount that works sends no extra request. ``None``
    when the first page failed in a way a later try may mend (throttled, endpoint down): the
    mount goes on and its loader lists from the start, retrying, as before."""
    listing = iter(store.list())
    try:
        head = next(listing, None)
    except (TransientStorageError, Busy) as exc:
        log.warning("the first listing of %s failed (%s); mounting and listing it again", url, exc)
        return None
    except DatahubError as exc:
        raise _cannot_mount(exc, url, store) from exc
    return itertools.chain(() if head is None else (head,), listing)


def _cannot_mount(exc: DatahubError, url: str, store) -> DatahubError:
    """``exc`` (its class, so its exit code) with a message saying nothing was mounted and
    what to do about it."""
    where = store.identity().split(" ", 1)[0]  # an S3 store's endpoint comes first
    at = f" at {where}" if where.startswith(("http://", "https://")) else ""
    if isinstance(exc, NotFound):
        todo = f"check the bucket's name in {url} and the endpoint{at} (s3.endpoint_url)"
    elif isinstance(exc, AccessDenied) and "s3_code" not in exc.details:  # no credentials at all
        todo = ""  # the message says where to set them
    elif isinstance(exc, AccessDenied):
        todo = (
            "the mount's credentials (s3.access_key_id / s3.profile / AWS_* of the user running "
            f"datahub mount) must be allowed s3:ListBucket on it{at}"
        )
    else:
        todo = "fix that, then mount again"
    err = copy.copy(exc)
    err.message = f"cannot mount {url}: its first listing failed: {exc.message}. Nothing is mounted" + (
        f"; {todo}" if todo else "."
    )
    err.args = (err.message,)
    err.details = {**exc.details, "url": url}
    return err
