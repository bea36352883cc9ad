"""The namespace of a version mount, paged from the catalog a directory at a time.

Why: the whole listing of a version used to be loaded into each daemon's heap before its
root listed (5x10^6 records: 13.5 s, 513 MB). A version is immutable, so nothing forces
that: a directory is listed when a lookup or readdir first needs it (one
``Catalog.list_directory`` query, a keyset range over that directory's keys, never a scan
of the version), and kept in a cache bounded in bytes (least recently used pages go).
docs/fuse.md, "The namespace of a version mount", has the design and measured figures.

Inode numbers never depend on what the cache holds:

* a directory gets a number the first time its parent is listed, kept for the mount's
  life (a small table: one entry per directory seen, never per file);
* a file's number is ``directory << 32 | position + 1``, its position in the directory's
  listing in key order, which an immutable version never changes.

So a page can be dropped at any time: the kernel (which holds an inode until FORGET) and
pyfuse3's C lookup table (``lookup_publish``, which answers LOOKUPs of names answered
before, for the mount's life) keep numbers that still name the same file; the next
request for one lists its directory again. FORGET stays a no-op.

The static top of the mount (``<dataset>/``, ``v<seq>/``, ref symlinks) is a small
:class:`ListingTree`; each version directory in it is the root of a paged namespace.
"""

from __future__ import annotations

import gc
import logging
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter

from datahub.catalog.model import DirFile
from datahub.errors import (
    AccessDenied,
    DatahubError,
    DatasetNotFound,
    InvalidKey,
    ListingUnavailable,
    NotFound,
    Unauthenticated,
)
from datahub.storage.base import ObjectRef
from datahub.validation import check_key
from fuse_adapter.tree import DIR, FILE, Attr, ListingTree

log = logging.getLogger(__name__)

DIR_SHIFT = 32  # a file's inode: its directory's inode << DIR_SHIFT | (position + 1)
MAX_DIRS = 1 << 29  # directory inodes stay below this: file inodes stay below 2**61 (virtual files: 2**62)
MAX_CHILDREN = (1 << DIR_SHIFT) - 1
PAGE_BUDGET = 64 * 1024**2  # bytes of directory pages a mount keeps (docs/fuse.md)
READDIR_CHUNK = 1024  # entries handed to one readdir call (the kernel asks again for the rest)
#: seconds either side of the epoch a record's mtime may be to show as a file's: a file time is
#: 64-bit nanoseconds (about 1677-2262). Beyond it (a value in milliseconds, say) a file shows
#: the version's time: converted, it failed the whole directory's listing (EIO for every file)
MTIME_MAX = 9.2e9
_ENTRY_OVERHEAD = 120  # bytes per entry beyond its strings: list slot, str header, arrays, ends

#: ``fetch(version, prefix)``: one directory level of a version in key order
#: (``Catalog.list_directory``): DirFile rows, and subdirectories as ``prefix + name + "/"``
Fetch = Callable[["PagedVersion", str], Iterator["DirFile | str"]]
#: ``has_entries(version, prefix)``: whether directory ``prefix`` ("a/b/") of a version holds
#: anything (``Catalog.list_directory`` with ``limit=1``: a seek into the directory table and one
#: into the records, or one keyset seek for a dataset listed without the table)
HasEntries = Callable[["PagedVersion", str], bool]


@dataclass(frozen=True, slots=True)
class PagedVersion:
    dataset: str
    seq: int
    mtime_ns: int  # of its directories, and of files whose record has no mtime

    @property
    def name(self) -> str:
        return f"{self.dataset}@v{self.seq}"


def _refused(version: PagedVersion, doing: str, exc: DatahubError) -> AccessDenied:
    """The catalog refused this mount's token for ``version``'s dataset (a token revoked, a
    role removed, the dataset deleted: a server answers a dataset hidden from the token as a
    missing one) while the mount runs: EACCES, not the EIO of a catalog that does not answer,
    and said as that, with what stays readable and what to do. Its "dataset not found; create
    it first" named the dataset the mount was serving as one to create (caller74)."""
    why = "" if isinstance(exc, DatasetNotFound) else f" ({exc})"
    return AccessDenied(
        f"{version.name}: the catalog refused this mount's token for dataset {version.dataset!r}, "
        f"{doing}{why}: the token was revoked, or no longer holds a role on the dataset, or the "
        "dataset was deleted. What this mount has listed stays readable (names, and bytes from "
        "this node's cache or the origin); nothing new is listed. Ask the dataset's owner for a "
        "grant, or put a new token in $DATAHUB_API_TOKEN, and remount",
        dataset=version.dataset,
    )


@dataclass(slots=True)
class _Dir:
    version: PagedVersion
    prefix: str  # "" for the version's root, else "a/b/"


def _pack(texts: list[str] | tuple[str, ...]) -> tuple[bytes, array]:
    """``texts`` as one UTF-8 blob (surrogateescape: names from ``os.fsdecode``) and the end
    offset of each: built by C loops (one join, one encode) when they are all ASCII."""
    joined = "".join(texts)
    if joined.isascii():
        return joined.encode("ascii"), array("Q", accumulate(map(len, texts)))
    encoded = [text.encode("utf-8", "surrogateescape") for text in texts]
    return b"".join(encoded), array("Q", accumulate(map(len, encoded)))


class _Page:
    """One directory's listing, children in key order (a subdirectory sorts as ``name/``).

    Columns, not an object per entry: the sort keys (a list, for bisecting a lookup), the
    same names packed as one bytes blob with their end offsets (what pyfuse3's
    ``readdir_fill`` packs READDIRPLUS replies from, in C), kinds, sizes, mtimes and inodes
    as arrays, URLs and etags as two more blobs. About 130 bytes per entry plus its name
    (twice), URL and etag; built by :meth:`PagedTree._list` in one pass of C loops."""

    __slots__ = (
        "sort_keys",
        "kinds",
        "sizes",
        "mtimes",
        "inos",
        "names",
        "name_ends",
        "urls",
        "url_ends",
        "etags",
        "etag_ends",
        "skip",
        "nbytes",
        "shadowed",
    )

    def __init__(
        self,
        sort_keys: list[str],
        kinds: bytes,
        sizes: array,
        mtimes: array,
        inos: array,
        urls: tuple[str, ...],
        etags: tuple[str, ...],
    ) -> None:
        """Pack the columns, and hide each file that a directory of the same name shadows
        (``a`` and ``a/b``: the directory wins, as in a bucket mount and mountpoint-s3)."""
        self.sort_keys, self.kinds, self.sizes, self.mtimes, self.inos = sort_keys, kinds, sizes, mtimes, inos
        self.names, self.name_ends = _pack(sort_keys)
        self.urls, self.url_ends = _pack(urls)
        self.etags, self.etag_ends = _pack(etags)
        n = len(sort_keys)
        self.nbytes = (
            _ENTRY_OVERHEAD * n
            + sum(map(len, sort_keys))
            + len(self.names)
            + len(self.urls)
            + len(self.etags)
        )
        self.shadowed: set[int] = set()  # positions of files hidden by a directory of their name
        for i in (i for i, kind in enumerate(kinds) if kind == DIR) if DIR in kinds else ():
            j = self.find(sort_keys[i][:-1], FILE)
            if j is not None:
                self.shadowed.add(j)
        self.skip: bytes | None = None  # readdir_fill's mask of the shadowed
        if self.shadowed:
            mask = bytearray(n)
            for j in self.shadowed:
                mask[j] = 1
            self.skip = bytes(mask)

    @staticmethod
    def _text(blob: bytes, ends: array, index: int) -> str:
        start = ends[index - 1] if index else 0
        return blob[start : ends[index]].decode("utf-8", "surrogateescape")

    def url(self, index: int) -> str:
        return self._text(self.urls, self.url_ends, index)

    def etag(self, index: int) -> str:
        return self._text(self.etags, self.etag_ends, index)

    def find(self, sort_key: str, kind: int) -> int | None:
        i = bisect_left(self.sort_keys, sort_key)
        if i < len(self.sort_keys) and self.sort_keys[i] == sort_key and self.kinds[i] == kind:
            return i
        return None

    def name(self, i: int) -> str:
        key = self.sort_keys[i]
        return key[:-1] if self.kinds[i] == DIR else key


def _may_be_key(path: str) -> bool:
    """Whether a record's key could be ``path`` or begin with ``path + "/"`` (check_key's rules).

    Why: the kernel hands lookups any bytes but "/" and NUL; a name no key can hold (not
    UTF-8, a control character, a path past MAX_KEY_BYTES) sent to the catalog as a
    subdirectory probe was an invalid key there, and the lookup answered EIO ("unknown"),
    where the same lookup after a listing answered ENOENT."""
    try:
        check_key(path)
    except InvalidKey:
        return False
    return True


class _CollectorPause:
    """The cyclic garbage collector held off while directory listings are built.

    Why: a listing of 10^4 entries allocates 10^4 row tuples (the catalog's rows; nothing
    in them refers back, so they never form a cycle) that live until the page is built.
    Each 700 such allocations start a young collection, and every few listings one of them
    becomes a full collection that walks every object not yet frozen: before the daemon
    freezes its long-lived objects (``daemon.freeze_long_lived``, a second after the
    namespace goes quiet), that is the start-up heap, ~45,000 objects, 18-28 ms of CPU
    with the GIL held inside the first cold ``ls`` after mounting (about 40 % of its
    daemon CPU). Paused, the tuples are freed by reference counting before any collection
    sees them. Shared by concurrent listings: the collector is re-enabled when the last one
    ends, and only if it was enabled when the first one began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._resume = False

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if not self._holders:
                self._resume = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if not self._holders and self._resume:
                    gc.enable()


_COLLECTOR = _CollectorPause()


class _Loading:
    """A directory being listed: later askers wait for the first one's answer."""

    __slots__ = ("done", "page", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.page: _Page | None = None
        self.error: ListingUnavailable | None = None


class PagedTree:
    """The read side of :class:`ListingTree` (what ``ReadOnlyView`` asks), for version mounts.

    Thread-safe. ``_lock`` guards the tables and the cache and is never held across a
    catalog query; methods that may query say so (the FUSE shim runs them in threads, and
    asks :meth:`resident` first on its loop).
    """

    def __init__(
        self,
        static: ListingTree,
        fetch: Fetch,
        *,
        budget_bytes: int = PAGE_BUDGET,
        has_entries: HasEntries | None = None,
    ) -> None:
        self.static = static
        self._fetch = fetch
        self._has_entries = has_entries
        self.budget = budget_bytes
        self._lock = threading.Lock()
        self._dirs: dict[int, _Dir] = {}  # every paged directory seen: inode -> where
        self._dir_inos: dict[tuple[PagedVersion, str], int] = {}
        self._next_dir = static.inode_count() + 1
        self._pages: OrderedDict[int, _Page] = OrderedDict()  # least recently used first
        self._bytes = 0
        self._loading: dict[int, _Loading] = {}
        self._records = 0
        self._read_last = 0  # the directory whose listing was read last (READDIRPLUS)
        self._ahead: int | None = None  # the directory read ahead now, or next (one at a time)
        self.loads = 0  # directory listings asked of the catalog (tests, stats)
        self.read_aheads = 0  # of which read ahead for a walk (tests, stats)
        self.probes = 0  # one-row directory checks asked of the catalog (tests, stats)

    # --- building (before mounting) -------------------------------------------------------------
    def attach(self, root: int, version: PagedVersion, records: int = 0) -> None:
        """Directory ``root`` of the static tree shows ``version``, paged."""
        with self._lock:
            self._dirs[root] = _Dir(version, "")
            self._dir_inos[version, ""] = root
            self._records += records

    # --- the cache -------------------------------------------------------------------------------
    def _page(self, ino: int, *, wait: bool) -> _Page | None:
        """Directory ``ino``'s page; listed now (blocking: a catalog query) if ``wait``."""
        with self._lock:
            page = self._pages.get(ino)
            if page is not None:
                self._pages.move_to_end(ino)
                return page
            if not wait:
                return None
            loading = self._loading.get(ino)
            first = loading is None
            if loading is None:
                loading = self._loading[ino] = _Loading()
            where = self._dirs[ino]
        if not first:
            loading.done.wait()
        else:
            try:
                with _COLLECTOR.held():
                    loading.page = self._list(ino, where)
            except (Unauthenticated, AccessDenied, DatasetNotFound) as exc:
                loading.error = _refused(where.version, f"listing directory {where.prefix or '/'!r}", exc)
            except Exception as exc:  # the catalog failed (part-way or not): unknown, not absent
                loading.error = ListingUnavailable(
                    f"{where.version.name}: listing directory {where.prefix or '/'!r} from the catalog "
                    f"failed ({exc}); its names are unknown, not absent. The next lookup lists it again",
                    path=where.prefix,
                )
            with self._lock:
                del self._loading[ino]
                if loading.page is not None:
                    self._pages[ino] = loading.page
                    self._bytes += loading.page.nbytes
                    while self._bytes > self.budget and len(self._pages) > 1:
                        _, old = self._pages.popitem(last=False)
                        self._bytes -= old.nbytes
            loading.done.set()
        if loading.error is not None:
            raise loading.error
        assert loading.page is not None
        return loading.page

    def _list(self, ino: int, where: _Dir) -> _Page:
        """One catalog query for directory ``ino``; the page is whole or not at all.

        Built column-wise (``zip`` transposes the rows, ``map`` cuts the prefix, arrays take
        the numbers): per entry, C loops only, except the few subdirectories and any file
        with an mtime of its own."""
        self.loads += 1
        version, prefix = where.version, where.prefix
        rows = list(self._fetch(version, prefix))
        n = len(rows)
        if n > MAX_CHILDREN:
            raise ValueError(f"more than {MAX_CHILDREN} entries in one directory")
        subdirs = [i for i, row in enumerate(rows) if row.__class__ is str]
        for i in subdirs:
            rows[i] = (rows[i], "", "", 0, None)  # a subdirectory: its key is prefix + name + "/"
        keys, urls, etags, sizes, mtimes = zip(*rows, strict=True) if n else ((),) * 5
        sort_keys = list(map(itemgetter(slice(len(prefix), None)), keys))
        kinds = bytearray(n)  # FILE == 0
        inos = array("Q", range((ino << DIR_SHIFT) + 1, (ino << DIR_SHIFT) + n + 1))
        for i in subdirs:
            kinds[i] = DIR
            inos[i] = self._subdir(version, keys[i])
        default = version.mtime_ns
        if mtimes.count(None) == n:
            times = array("q", [default]) * n
        else:  # a time no file can show in ns (e.g. milliseconds) is the version's, like none
            times = array(
                "q",
                [default if m is None or not -MTIME_MAX < m < MTIME_MAX else int(m * 1e9) for m in mtimes],
            )
        return _Page(sort_keys, bytes(kinds), array("q", sizes), times, inos, urls, etags)

    def _subdir(self, version: PagedVersion, prefix: str) -> int:
        with self._lock:
            ino = self._dir_inos.get((version, prefix))
            if ino is None:
                if self._next_dir >= MAX_DIRS:
                    raise ValueError(f"more than {MAX_DIRS} directories in one mount")
                ino = self._next_dir
                self._next_dir += 1
                self._dirs[ino] = _Dir(version, prefix)
                self._dir_inos[version, prefix] = ino
            return ino

    def _file(self, ino: int, *, wait: bool = True) -> tuple[_Page, int] | None:
        """(page, position) of file inode ``ino``; NotFound if there is no such file."""
        parent, position = ino >> DIR_SHIFT, (ino & MAX_CHILDREN) - 1
        if parent not in self._dirs or position < 0:
            raise NotFound(f"no inode {ino}")
        page = self._page(parent, wait=wait)
        if page is None:
            return None
        if position >= len(page.sort_keys) or page.kinds[position] != FILE:
            raise NotFound(f"no inode {ino}")
        return page, position

    def resident(self, ino: int) -> bool:
        """Whether requests about ``ino`` can be answered without a catalog query."""
        parent = ino >> DIR_SHIFT
        if parent in self._dirs:
            with self._lock:
                return parent in self._pages
        return True  # a directory's own attributes never need its page; nor does a virtual file

    def make_resident(self, ino: int) -> None:
        """Blocking: list the directory of file ``ino`` again (its page was dropped)."""
        if ino >> DIR_SHIFT:
            self._file(ino)

    # --- what ReadOnlyView asks ------------------------------------------------------------------
    def is_dir(self, ino: int) -> bool:
        return ino in self._dirs or self.static.is_dir(ino)

    def exists(self, ino: int) -> bool:
        if ino >> DIR_SHIFT:
            return (ino >> DIR_SHIFT) in self._dirs
        return ino in self._dirs or self.static.exists(ino)

    def attr(self, ino: int) -> Attr:
        """May block (a file whose directory's page was dropped)."""
        if ino >> DIR_SHIFT:
            found = self._file(ino)
            assert found is not None
            page, i = found
            return Attr(FILE, page.sizes[i], page.mtimes[i])
        where = self._dirs.get(ino)
        if where is not None and where.prefix:
            return Attr(DIR, 0, where.version.mtime_ns)
        return self.static.attr(ino)

    def name(self, ino: int) -> str:
        if ino >> DIR_SHIFT:
            found = self._file(ino)
            assert found is not None
            return found[0].name(found[1])
        where = self._dirs.get(ino)
        if where is not None and where.prefix:
            return where.prefix[:-1].rpartition("/")[2]
        return self.static.name(ino)

    def readlink(self, ino: int) -> str:
        return self.static.readlink(ino)

    def lookup_now(self, parent: int, name: str) -> object:
        """Inode, None (absent) or ``...``: the directory is not listed yet (use :meth:`lookup`)."""
        if parent not in self._dirs:
            return self.static.lookup_now(parent, name)
        page = self._page(parent, wait=False)
        return ... if page is None else self._find(page, name)

    def lookup(self, parent: int, name: str, timeout: float | None = None) -> int | None:
        """Blocking: lists directory ``parent`` if it is not in the cache (one catalog query);
        ListingUnavailable (EIO) if that fails, never None for a name it could not see.

        A name in a directory not listed yet is first tried as a subdirectory, with a one-row
        query (``has_entries``): a path ``a/b/c`` walked from the root then lists only the
        directories it reads, not every directory on the way (at 10^8 records a directory of
        100 subdirectories costs 100 keyset seeks to list, one to probe). Directories win
        over files of the same name, so a hit is the answer; a miss lists the directory,
        which alone can say "absent" (and gives a file its position)."""
        if parent not in self._dirs:
            return self.static.lookup(parent, name, timeout)
        page = self._page(parent, wait=False)
        if page is None and not _may_be_key(self._dirs[parent].prefix + name):
            return None  # no record can have it (not UTF-8, a control character, too long): absent
        if page is None and self._has_entries is not None:
            found = self._probe_subdir(parent, name)
            if found is not None:
                return found
        if page is None:
            page = self._page(parent, wait=True)
        assert page is not None
        return self._find(page, name)

    def _probe_subdir(self, parent: int, name: str) -> int | None:
        """Directory ``parent``/``name``'s inode if it holds anything, else None (unknown:
        the caller lists ``parent``). ListingUnavailable if the catalog cannot say."""
        where = self._dirs[parent]
        prefix = f"{where.prefix}{name}/"
        assert self._has_entries is not None
        self.probes += 1
        try:
            present = self._has_entries(where.version, prefix)
        except (Unauthenticated, AccessDenied, DatasetNotFound) as exc:
            raise _refused(where.version, f"looking up directory {prefix!r}", exc) from exc
        except Exception as exc:  # the catalog failed: unknown, not absent
            raise ListingUnavailable(
                f"{where.version.name}: looking up directory {prefix!r} in the catalog failed ({exc}); "
                "the name is unknown, not absent. The next lookup asks again",
                path=prefix,
            ) from exc
        return self._subdir(where.version, prefix) if present else None

    @staticmethod
    def _find(page: _Page, name: str) -> int | None:
        i = page.find(name + "/", DIR)
        if i is None:
            i = page.find(name, FILE)
            if i is None or i in page.shadowed:
                return None
        return page.inos[i]

    def readdir(self, ino: int, start: int, *, wait: bool = False) -> list[tuple[str, int, int]]:
        """Children from position ``start`` on, as (name, inode, next position); at most
        READDIR_CHUNK of them (an empty list is the end). Without ``wait``, empty while the
        directory is not listed (see :meth:`dir_complete`)."""
        if ino not in self._dirs:
            return self.static.readdir(ino, start, wait=wait)
        page = self._page(ino, wait=wait)
        if page is None:
            return []
        end = min(len(page.sort_keys), start + READDIR_CHUNK)
        return [(page.name(i), page.inos[i], i + 1) for i in range(start, end) if i not in page.shadowed]

    def is_paged(self, ino: int) -> bool:
        """Whether ``ino`` is a paged directory (its listing is a page: :meth:`columns`)."""
        return ino in self._dirs

    def columns(self, ino: int, *, wait: bool) -> _Page | None:
        """Paged directory ``ino``'s page, whose columns the FUSE shim packs READDIRPLUS
        replies from in C (pyfuse3's ``readdir_fill``): entry ``i``'s offset is ``i + 1``,
        as in :meth:`readdir`. Without ``wait``, None while it is not listed; with it, may
        block (one catalog query) and raises ListingUnavailable like :meth:`readdir`.
        A walk in key order (``find``, ``os.walk``) has its next directory read ahead
        (:meth:`_follow`)."""
        self._follow(ino)
        return self._page(ino, wait=wait)

    def _follow(self, ino: int) -> None:
        """Read ahead for a walk: when directory ``ino`` is read right after the subdirectory
        before it in the same parent (``find``, ``os.walk`` and ``du`` read a parent's
        subdirectories in its key order), list the subdirectory after it in a thread now.

        Why: a walk was strictly serial, one directory at a time: the catalog query and the
        page (the daemon's CPU, and through the remote catalog the server's and a round
        trip), then the walker's kernel turning the READDIRPLUS entries into inodes (2-4 us
        per entry in its own process), then the next directory's query. Read ahead, the
        next directory's query runs while the kernel takes this one's entries. One thread
        reads ahead, one directory at a time, into the same bounded cache; a walk that
        catches up with it leaves the next directory for it to read after the one at hand
        (never more than one waiting). A random ``ls`` (whose previous directory is seldom
        the sibling before) reads nothing ahead."""
        if ino == self._read_last:  # the same directory's next READDIRPLUS
            return
        with self._lock:
            previous, self._read_last = self._read_last, ino
            where = self._dirs.get(ino)
            if where is None or not where.prefix:
                return
            head, _, name = where.prefix[:-1].rpartition("/")
            parent = self._dir_inos.get((where.version, head + "/" if head else ""))
            page = self._pages.get(parent) if parent is not None else None
            here = page.find(name + "/", DIR) if page is not None else None
            if page is None or here is None:
                return
            self._pages.move_to_end(parent)  # in use while its subdirectories are walked
            before = page.kinds.rfind(DIR, 0, here)
            after = page.kinds.find(DIR, here + 1)
            if before < 0 or page.inos[before] != previous or after < 0:
                return
            ahead = page.inos[after]
            if ahead in self._pages or ahead in self._loading:
                return
            start, self._ahead = self._ahead is None, ahead
        if start:
            try:
                threading.Thread(target=self._read_ahead, name="namespace-read-ahead", daemon=True).start()
            except RuntimeError as exc:  # no thread to be had now: the walk lists it itself
                log.debug("reading a directory ahead: %s", exc)
                with self._lock:
                    self._ahead = None

    def _read_ahead(self) -> None:
        """The read-ahead thread: lists ``_ahead`` until no directory is left waiting."""
        while True:
            with self._lock:
                ino = self._ahead
                if ino is None or ino in self._pages:
                    self._ahead = None
                    return
                self.read_aheads += 1
            try:
                self._page(ino, wait=True)
            # the reader that needs it lists it again itself (and is told, if it is refused)
            except (ListingUnavailable, AccessDenied) as exc:
                log.debug("reading a directory ahead: %s", exc)
            with self._lock:
                if self._ahead == ino:
                    self._ahead = None
                    return

    def dir_complete(self, ino: int) -> bool:
        """Whether :meth:`readdir` without ``wait`` answers (the directory is listed)."""
        if ino not in self._dirs:
            return self.static.dir_complete(ino)
        with self._lock:
            return ino in self._pages

    def key(self, ino: int) -> str:
        found = self._file(ino)
        assert found is not None
        page, i = found
        return self._dirs[ino >> DIR_SHIFT].prefix + page.name(i)

    def ref(self, ino: int) -> ObjectRef:
        """What the cache needs to read file ``ino``; may block like :meth:`attr`."""
        if not ino >> DIR_SHIFT:
            raise IsADirectoryError(ino)
        found = self._file(ino)
        assert found is not None
        page, i = found
        return ObjectRef(page.url(i), page.etag(i), page.sizes[i])

    def walk_files(self, root: int) -> Iterator[tuple[str, ObjectRef, int]]:
        """(key, ref, mtime_ns) of every file below ``root`` in key order, a directory at a
        time through the cache (memory stays bounded; each directory costs a query)."""
        stack = [(root, 0)]
        while stack:
            ino, start = stack.pop()
            entries = self.readdir(ino, start, wait=True)
            for _name, child, following in entries:
                if self.is_dir(child):
                    stack += [(ino, following), (child, 0)]
                    break
                yield self.key(child), self.ref(child), self.attr(child).mtime_ns
            else:
                if entries:
                    stack.append((ino, entries[-1][2]))

    # --- accounting --------------------------------------------------------------------------
    def inode_count(self) -> int:
        return self.static.inode_count() + self._records

    def nbytes(self) -> int:
        """Bytes of the directory pages held (the bounded part) and of the directory table."""
        with self._lock:
            return self._bytes + 200 * len(self._dirs)

    def stats(self) -> dict:
        with self._lock:
            return {
                "pages": len(self._pages),
                "page_bytes": self._bytes,
                "budget_bytes": self.budget,
                "directories_seen": len(self._dirs),
                "directory_listings": self.loads,
                "directory_read_aheads": self.read_aheads,
                "directory_probes": self.probes,
            }
