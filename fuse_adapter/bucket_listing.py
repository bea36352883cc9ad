"""How a direct bucket mount lists its bucket: whole when small, by directory when large.

Why: the first mount of a bucket used to list all of it before a reader's lookup could be
answered past the listing's cursor, so reading ten files of a 100,000-object bucket cost
100 LIST pages (issue 27). Now (docs/fuse.md "Listing a large bucket by directory"):

* the whole listing runs first, as before, and is committed as the snapshot when the
  bucket has at most ``cache.bucket_list_whole_objects`` keys;
* past that many keys it stops, and each directory a lookup or readdir needs is listed by
  itself (prefix + ``/`` delimiter, every page of that level, once) by a few lister
  threads: ten files in ten directories cost a root page and ten directory pages;
* a partial listing is never committed. The snapshot (the record of what the mount
  showed, and what the warm-up's totals come from) is the whole listing, taken again in the background only
  when :meth:`BucketLister.want_whole` is called: the warm-up asks once readers have
  opened as many distinct files as an epoch pattern needs (``bucket_warmup_opens``), so
  a reader of a handful of files never pays for it.

A snapshot is committed only into a dataset as mounts make it (``foreign_snapshot``);
otherwise the listing is served, not recorded, and a by-directory mount's warm-up streams
the whole listing from the bucket each time instead of from the snapshot.
"""

from __future__ import annotations

import getpass
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator

from datahub.catalog.catalog import listing_changes
from datahub.catalog.model import Change, Dataset, Record, Version
from datahub.errors import DatasetNotFound, InvalidInput, StaleBase
from datahub.storage.base import ObjectInfo, ObjectRef
from datahub.validation import check_new_key
from fuse_adapter.listing_load import load_records
from fuse_adapter.tree import ROOT_INODE, Feed, ListingTree

log = logging.getLogger(__name__)

LISTERS = 4  # directories listed at once (a lookup waits for its own directory's first page)
FLUSH = 1000  # entries handed to the tree at a time: about one LIST page
SNAPSHOT_TRIES = 3  # commits refused because the head moved before the snapshot is given up


def foreign_snapshot(dataset: Dataset, url: str) -> str:
    """Why a mount of ``url`` must not commit its listing into ``dataset``; "" when it may.

    It may only into the dataset as mounts make it (``layout.bucket_view``; the remote
    store's ``mount_made``; ``csi/access.bucket_snapshot``): no owner, no access list, and
    ``url`` as its source (a trailing ``/`` names the same prefix) with its scheme in lower
    case: the name always is (``S3://b/p`` makes ``s3.b.p``), and the CSI plugin knows a
    snapshot by its source's scheme as written starting its name
    (``csi/access.bucket_snapshot``), so one made by a mount of ``S3://b/p`` was open to every
    pod (review13b). Anyone else's dataset of that name (made before only admins could, by a
    node's token, by a local user) gave its owner, or those its access list names, this
    mount's listing of a bucket they may not list, and then its objects through the
    platform's credentials (a CSI dataset volume, the browser's previews)."""
    why = []
    if dataset.owner:
        why.append(f"owned by {dataset.owner!r}")
    if dataset.acl:
        why.append(f"an access list granting {', '.join(sorted(dataset.acl))}")
    if dataset.source.rstrip("/") != url.rstrip("/"):
        why.append(f"source {dataset.source!r}, not {url!r}")
    scheme = dataset.source.partition("://")[0]
    if scheme != scheme.lower():  # the name is in lower case: csi/access.bucket_snapshot missed it
        why.append(f"a source whose scheme {scheme!r} is not in lower case (mount {scheme.lower()}://…)")
    return "; ".join(why)


def _not_a_snapshot(dataset: str, reason: str) -> str:
    """What ``.datahub`` (and the log) say of a snapshot dataset ``foreign_snapshot`` refused."""
    return (
        f"not committed: dataset {dataset!r} is not a snapshot as bucket mounts make it ({reason}); its "
        "listing is served, but no mount of this bucket records a snapshot while that dataset has an "
        "owner, an access list or another source"
    )


def _head_keys(catalog, dataset: str, head: int) -> Iterator[str]:
    """The keys of version ``head`` of the snapshot dataset in key order (0: none), streamed:
    the store lists by keyset pages, so a head of 10^7 keys is never held whole (issue 38: a
    set of its keys took GBs), and reads the keys alone (the merge needs no more of them)."""
    return catalog.list_keys(dataset, head) if head else iter(())


def _exactly(records: Iterable[Record], head_keys: Iterator[str]) -> Iterator[Change]:
    """Changes making the next version exactly ``records``: puts of them all, and deletes of
    the keys of the head they lack. Puts alone would keep every key of the head: one deleted
    from the bucket since, or one any token planted in the dataset.

    Both sides come in key order (a bucket lists in UTF-8 byte order, which is ``str`` order;
    the catalog's keys are TEXT in binary order, the same; the tree walks its files in it), so
    this is a streaming merge holding one record and one key; a listing out of order is
    refused (the commit rolls back) rather than deleting keys it holds."""
    return listing_changes(head_keys, records)


def _count_shadowed(records: Iterable[Record], into) -> Iterator[Record]:
    """``records`` (in key order) as they come, counting into ``into`` (a MountInfo) each file
    a later key puts a directory over (``a`` before ``a/b``): ``shadowed``, and their sizes in
    ``bytes``. Why: ``.datahub`` counts what a mount listed by directory shows from its
    snapshot, as a whole listing counts it (``ListingTree``); it gave every record as a file and
    no shadowed key. Holds only the chain of keys still open to a directory (``a``, ``a-x``:
    each the one before plus characters sorting before ``/``), never the listing."""
    chain: list[Record] = []
    for record in records:
        key = record.key
        while chain and key >= chain[-1].key + "0":  # past every key under it ("0" follows "/")
            chain.pop()
        if chain and key.startswith(chain[-1].key + "/"):
            hidden = chain.pop()
            into.shadowed += 1
            into.bytes += hidden.size
        chain.append(record)
        yield record


class BucketLister:
    """The listing of one bucket mount: ``run`` on the loader thread."""

    def __init__(
        self,
        tree: ListingTree,
        feed: Feed,
        store,  # datahub.storage.base.ObjectStore
        info,  # fuse_adapter.mount_info.MountInfo
        catalog_factory: Callable[[], object],
        dataset: str,
        url: str,
        *,
        whole_max: int,
        on_by_directory: Callable[[], None] | None = None,
        first: Iterator[ObjectInfo] | None = None,
        record: bool = True,
        shared: bool = False,
    ) -> None:
        """``first``: the bucket's listing from its start, its first page already fetched
        (``layout.first_listing``): the whole listing goes on from it instead of asking for
        that page again. ``record`` false (``--no-snapshot``): the listing is served and
        committed nowhere. Why (caller71): a snapshot's URLs name the bucket, never the
        endpoint, so a CSI bucket volume listed from an endpoint its pod's Secret named (a
        bucket of the platform bucket's name there) committed that endpoint's listing as the
        platform bucket's snapshot, which pods granted on it read with the platform's keys.
        ``shared`` (``--allow-other``): other accounts read this mount's ``.datahub``, holding
        none of its catalog credentials, so it says why a snapshot is not committed without the
        dataset's owner, access list or source (``_unrecorded``); the log keeps them."""
        self._tree = tree
        self._first = first
        self._feed = feed
        self._store = store
        self._info = info
        self._catalog_factory = catalog_factory
        self._dataset = dataset
        self._url = url
        self._whole_max = max(0, whole_max)
        self._on_by_directory = on_by_directory
        self._record = record
        self._shared = shared
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._whole = threading.Event()
        self._stopped = False
        self.by_directory = False
        self.version: Version | None = None  # the committed snapshot, by-directory mode
        self.refused = (
            ""  # why no snapshot is committed (foreign_snapshot, unreadable); the listing is served
        )

    # --- the loader thread ------------------------------------------------------------------------
    def run(self) -> None:
        tree, info = self._tree, self._info
        mtime = tree.attr(ROOT_INODE).mtime_ns / 1e9
        whole = load_records(
            tree, self._feed, lambda cursor: self.records(info, cursor), mtime, info, limit=self._whole_max
        )
        if whole:
            if self._feed.error is None:
                self.version = self._commit(
                    lambda: (
                        Record(k, r.url, r.etag, r.size, meta={"mtime": m / 1e9})
                        for k, r, m in tree.walk_files(ROOT_INODE, shadowed=True)
                    )
                )
            return
        self.by_directory = True
        for i in range(LISTERS):
            threading.Thread(target=self._serve, name=f"datahub-list-dir-{i}", daemon=True).start()
        if self._on_by_directory is not None:
            self._on_by_directory()
        tree.list_by_directory(self._feed, self._request)
        info.state, info.listing = "ready", "by-directory"
        log.info(
            "%s has more than %d objects: listing it by directory as readers reach them; "
            "the whole listing (the snapshot) waits until readers open many files",
            self._url, self._whole_max,
        )  # fmt: skip
        self._whole.wait()
        if self._stopped:
            return
        counts = []  # skipped and shadowed keys of each listing taken (a retry lists again)

        def listing() -> Iterator[Record]:
            counts.append(type(info)(source=self._url))
            return _count_shadowed(self.records(counts[-1]), counts[-1])

        def counted(version: Version) -> None:
            # the files the mount shows, as a whole listing counts them: the snapshot records a
            # file a directory of its name hides (``shadowed``), the mount does not show it
            listed = counts[-1]
            info.files = version.record_count - listed.shadowed
            info.bytes = version.total_bytes - listed.bytes
            info.shadowed = listed.shadowed

        version = self._commit(listing, counted)
        if counts:  # else nothing was listed whole (a foreign dataset): the directories' count stays
            info.skipped = counts[-1].skipped
        self.version = version

    def want_whole(self) -> None:
        """Take the whole listing as the snapshot now (in the background; once)."""
        if not self._whole.is_set():
            log.info("readers open many files of %s: taking its whole listing as the snapshot", self._url)
            self._whole.set()

    def stop(self) -> None:
        """End the lister threads and a whole listing not yet begun (tests; a mount's process exits)."""
        self._stopped = True
        self._whole.set()
        for _ in range(LISTERS):
            self._queue.put(0)

    def files(self) -> Iterator[ObjectRef]:
        """Every object of the snapshot (once the loader thread is done); with none committed
        into a foreign dataset, of the bucket's listing taken again (by directory)."""
        if not self.by_directory:
            yield from (ref for _k, ref, _m in self._tree.walk_files(ROOT_INODE))
            return
        if self.version is None:
            if self.refused:  # no snapshot to read it from: the bucket's own listing, again
                yield from (
                    ObjectRef(r.url, r.etag, r.size) for r in self.records(type(self._info)(source=self._url))
                )
            return
        catalog = self._catalog_factory()
        try:
            for r in catalog.list_records(self.version.dataset, self.version.seq):
                yield ObjectRef(r.url, r.etag, r.size)
        finally:
            catalog.close()

    def records(self, info, start_after: str = "") -> Iterator[Record]:
        """The bucket listing as records; keys no file system can show are skipped and counted.

        Skipped alike: keys a version may not hold (``check_new_key``), such as reserved
        ``.datahub-hint-`` names, which are then neither listed, readable nor in the snapshot."""
        store = self._store
        listing, self._first = self._first, None  # the first listing is read once, from its start
        if listing is None or start_after:
            listing = store.list(start_after=start_after)
        for obj in listing:
            try:
                check_new_key(obj.key)
            except InvalidInput:
                info.skipped += 1
                continue
            yield Record(obj.key, store.url_for(obj.key), obj.etag, obj.size, meta={"mtime": obj.mtime})

    def _commit(
        self,
        records: Callable[[], Iterable[Record]],
        counted: Callable[[Version], None] | None = None,
    ) -> Version | None:
        """Commit exactly ``records()`` as the snapshot's next version; ``counted(version)``
        sets ``.datahub``'s counts from it before ``.datahub`` names it (one consistent state).

        Why the base and the retries: the deletes are the head's keys the listing lacks, so
        the head they come from must be the version the commit goes on. Any token may commit
        to the dataset; one landing between reading the head and the commit's turn made the
        snapshot go on top of it while deleting only the older head's keys, and its planted
        records stayed in the snapshot. With ``base`` the store refuses such a commit
        (StaleBase); the next try reads the new head and lists again."""
        info = self._info
        if not self._record:
            self.refused = "listed from an endpoint other than the catalog's"
            self._unrecorded(
                f"not committed: {self._url} was listed from an S3 endpoint the mount was given for "
                f"itself (--no-snapshot: a CSI volume's Secret names it), so its listing is not the "
                f"snapshot of that bucket that dataset {self._dataset!r} records"
            )
            return None
        catalog = self._catalog_factory()
        try:
            for attempt in range(1, SNAPSHOT_TRIES + 1):
                try:
                    dataset = catalog.get_dataset(self._dataset)
                except DatasetNotFound:  # made by this mount, yet not this catalog client's to read
                    self.refused = "its dataset cannot be read with this mount's catalog credentials"
                    self._unrecorded(
                        f"not committed: dataset {self._dataset!r} cannot be read with this mount's "
                        "catalog credentials (over HTTP only a global admin's token reads a bucket "
                        "snapshot's dataset)"
                    )
                    return None
                why = foreign_snapshot(dataset, self._url)
                if why:
                    self.refused = why
                    shown = "the mount's log says why" if self._shared else why
                    self._unrecorded(
                        _not_a_snapshot(self._dataset, shown), _not_a_snapshot(self._dataset, why)
                    )
                    return None
                head = catalog.store.head(self._dataset) or 0
                try:
                    version = catalog.commit(
                        self._dataset,
                        _exactly(records(), _head_keys(catalog, self._dataset, head)),
                        base=head,
                        message=f"snapshot of {self._url} taken by a mount",
                        author=getpass.getuser(),
                        lineage={"snapshot_of": self._url},
                    )
                    break
                except StaleBase:
                    if attempt == SNAPSHOT_TRIES:
                        raise
                    log.info("%s changed while its snapshot was committed; taking it again", self._dataset)
            if counted is not None:
                counted(version)
            info.versions.append(f"{self._dataset}@v{version.seq}")
            info.state, info.snapshot = "ready", "committed"
            log.info("snapshot of %s committed as %s@v%d", self._url, self._dataset, version.seq)
            return version
        except BaseException as exc:
            info.state, info.error = "failed", f"committing the snapshot failed: {exc}"
            log.error("%s", info.error)
            return None
        finally:
            catalog.close()

    def _unrecorded(self, snapshot: str, logged: str = "") -> None:
        """Serve the listing without committing it; ``.datahub`` says why (``snapshot``), and
        the log too (``logged`` when it says more, else ``snapshot``).

        Why not "failed": the mount lists and serves the bucket as it is either way; only the
        record of it is missing. A node whose API token is not a global admin's made the
        ownerless snapshot dataset (the remote store lets it) but may not read it, and its
        mount showed ``"state": "failed"`` for a listing it served.

        Why two texts (caller72): a CSI bucket volume's pods read ``.datahub``, and the reason
        named the owner and the access list's principals of another tenant's dataset squatting
        the snapshot's name, which the mount read with the plugin's catalog credentials, not
        the pod's (its own are S3 keys for its bucket). The node's log, the operator's, names them."""
        info = self._info
        info.state, info.snapshot = "ready", snapshot
        log.warning("the listing of %s is served, %s", self._url, logged or snapshot)

    # --- directory by directory ---------------------------------------------------------------------
    def _request(self, ino: int, relpath: str) -> None:
        self._queue.put(ino)  # called under the tree's lock: only a put

    def _serve(self) -> None:
        while (ino := self._queue.get()) and not self._stopped:
            self._list_dir(ino)

    def _list_dir(self, ino: int) -> None:
        tree, store = self._tree, self._store
        prefix, after = tree.listing_start(ino)
        batch: list[tuple[str, int, float, str, str] | str] = []
        try:
            for item in store.list_dir(prefix, after):
                entry = self._entry(prefix, item)
                if entry is not None:
                    batch.append(entry)
                if len(batch) >= FLUSH:
                    tree.add_listed(ino, batch)
                    batch = []
            tree.add_listed(ino, batch, done=True)
        except Exception as exc:  # a lister thread's top level: lookups there fail (EIO) and ask again
            log.error("listing %s%s failed: %s", self._url.rstrip("/") + "/", prefix, exc)
            tree.add_listed(ino, batch, error=exc)

    def _entry(self, prefix: str, item: ObjectInfo | str) -> tuple[str, int, float, str, str] | str | None:
        """A tree entry, or None for a key no file system can show (as the whole listing skips it)."""
        key = item if isinstance(item, str) else item.key
        try:
            check_new_key(key + "x" if isinstance(item, str) else key)
        except InvalidInput:
            if not isinstance(item, str):
                self._info.skipped += 1
            return None
        if isinstance(item, str):
            return item[len(prefix) : -1]
        return (item.key[len(prefix) :], item.size, item.mtime, self._store.url_for(item.key), item.etag)
