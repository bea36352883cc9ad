"""The compact listing index behind a read-only mount: inodes, lookup and readdir.

A mounted version is immutable, so its whole namespace is built once from the version
listing (the catalog streams it in key order) and every lookup, getattr and readdir is
answered from memory: no object-store LIST or HEAD per stat.

Memory matters at 1,000,000 entries, so there is no Python object per file. Every
attribute lives in a parallel ``array`` indexed by inode number and every string (name,
etag, unusual URL) in one ``bytearray``; only directories get a small Python object
(their child list). ``docs/fuse.md`` has the measured bytes per entry.

The index is built *incrementally* while it is already mounted (a direct bucket mount is
browsable before its LIST finishes). Keys arrive in sorted order, which gives two facts
the rest relies on:

* a directory's children arrive in order of their *sort key* (``name`` for a file,
  ``name + "/"`` for a directory), so a lookup is a binary search;
* once the listing cursor has passed ``<dir>/<name>0`` (``"0"`` sorts right after
  ``"/"``), nothing more can appear under that name: the answer is final. Until then a
  lookup waits (in a worker thread), and readdir streams only final entries.

A large bucket is not listed whole before a reader can use it (docs/fuse.md "Listing a
large bucket by directory"): the whole listing may stop at its cursor, and from then on
each directory is listed by itself (a prefix and a ``/`` delimiter) when a lookup or
readdir first needs it. A directory's own listing arrives in the same sort order, so the
same two facts hold per directory with the directory's own cursor.

A key that is both a file and a directory prefix (``a`` and ``a/b``) shows the directory,
as mountpoint-s3 does; the shadowed file is counted in :attr:`Feed.shadowed`.
"""

from __future__ import annotations

import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from datahub.errors import ListingUnavailable
from datahub.storage.base import ObjectRef

ROOT_INODE = 1  # the FUSE root inode number

FILE, DIR, SYMLINK = 0, 1, 2
_URL_IS_BASE_PLUS_KEY = 4  # flag bit in ``_kind``: the object URL is ``feed.url_base + key``
_HIDDEN = 8  # flag bit in ``_kind``: a file shadowed by a directory of the same name
_KIND_MASK = 3
_CHILD_SEP = "0"  # chr(ord("/") + 1): every key under "<dir>/<name>" sorts before "<dir>/<name>0"
_PAST_DIR = "/\U0010ffff"  # a listed subdirectory "name" moves its parent's cursor to name + this


class StringTable:
    """Many short strings in one bytearray; ``add`` returns an index."""

    __slots__ = ("_blob", "_ends")

    def __init__(self) -> None:
        self._blob = bytearray()
        self._ends = array("Q")

    def add(self, text: str) -> int:
        self._blob += text.encode("utf-8", "surrogateescape")
        self._ends.append(len(self._blob))
        return len(self._ends) - 1

    def get(self, index: int) -> str:
        return self.get_bytes(index).decode("utf-8", "surrogateescape")

    def get_bytes(self, index: int) -> bytearray:
        """The UTF-8 bytes (a bytearray slice: compares like bytes, one copy fewer)."""
        start = self._ends[index - 1] if index else 0
        return self._blob[start : self._ends[index]]

    def nbytes(self) -> int:
        return len(self._blob) + self._ends.itemsize * len(self._ends)


@dataclass(slots=True)
class Feed:
    """One version's listing being loaded under a directory of the tree."""

    root: int  # inode of the directory the keys are relative to
    url_base: str = ""  # most record URLs are url_base + key; those are not stored
    cursor: str = ""  # the greatest key added so far
    done: bool = False
    #: why loading stopped short of ``done`` (the loader retries; cleared by its progress)
    error: BaseException | None = None
    failures: int = 0
    name: str = ""  # "dataset@vN" or the bucket URL, for messages
    files: int = 0
    bytes: int = 0
    shadowed: int = 0  # files hidden by a directory of the same name
    skipped: int = 0  # keys a file system cannot show (reported by the loader)
    last_dir: str = ""  # directory of the previous key and its inode: most keys share it
    last_dir_ino: int = 0
    #: set once the whole listing stopped at ``cursor``: ``by_dir(ino, relpath)`` asks for
    #: directory ``ino`` to be listed by itself (called under the tree's lock: must not block)
    by_dir: Callable[[int, str], None] | None = None

    def final(self, relpath: str) -> bool:
        """True once nothing more can be added at or below ``relpath``."""
        return self.done or self.cursor >= relpath + _CHILD_SEP


@dataclass(slots=True)
class DirListing:
    """One directory's own listing, once its feed lists by directory."""

    cursor: str = ""  # the greatest child listed: "name", or name + _PAST_DIR for a subdirectory
    done: bool = False
    #: why the last attempt stopped short of ``done``; the next lookup that needs this
    #: directory asks for it again
    error: BaseException | None = None
    failures: int = 0


@dataclass(slots=True)
class _Dir:
    children: array = field(default_factory=lambda: array("I"))
    feed: Feed | None = None  # None: a static directory (dataset level) built before mounting
    relpath: str = ""  # path relative to feed.root, "" for the root of the feed
    symlinks: dict[int, str] | None = None  # child inode -> target
    ino: int = 0
    listing: DirListing | None = None  # asked for (by_dir mode) when first needed


@dataclass(frozen=True, slots=True)
class Attr:
    kind: int  # FILE, DIR or SYMLINK
    size: int
    mtime_ns: int


class ListingTree:
    """Inodes and names of a read-only namespace built from sorted listings.

    Thread-safe: a loader thread appends while FUSE handlers read. Every method holds
    ``_lock`` only for in-memory work (no I/O), and waiters block on ``_changed``.
    """

    def __init__(self, *, mtime: float | None = None) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # index 0 is unused so that inode numbers index the arrays directly
        self._parent = array("I", [0, 0])
        self._kind = array("B", [0, DIR])
        self._name = array("I", [0, 0])
        self._size = array("q", [0, 0])
        self._mtime = array("q", [0, _ns(mtime)])
        self._extra = array("I", [0, 0])  # file: etag index (url index follows when not base+key)
        self._strings = StringTable()
        self._strings.add("")  # index 0: the empty string
        self._dirs: dict[int, _Dir] = {ROOT_INODE: _Dir()}

    # --- building ----------------------------------------------------------------------------
    def add_dir(self, parent: int, name: str, *, mtime: float | None = None) -> int:
        """A static directory (e.g. ``<dataset>`` or ``<dataset>/v3``) added before mounting."""
        with self._lock:
            ino = self._new_node(parent, name, DIR, 0, _ns(mtime), 0)
            self._dirs[ino] = _Dir()
            return ino

    def add_symlink(self, parent: int, name: str, target: str, *, mtime: float | None = None) -> int:
        with self._lock:
            ino = self._new_node(parent, name, SYMLINK, len(target.encode()), _ns(mtime), 0)
            d = self._dirs[parent]
            d.symlinks = d.symlinks or {}
            d.symlinks[ino] = target
            return ino

    def sort_static_dir(self, ino: int) -> None:
        """Put a static directory's children in lookup order (call before mounting)."""
        with self._lock:
            d = self._dirs[ino]
            assert d.feed is None, "a listing-fed directory is already in order"
            d.children = array("I", sorted(d.children, key=self._sort_key))

    def start_feed(self, root: int, url_base: str = "", name: str = "") -> Feed:
        """Keys added through the returned feed are relative to directory ``root``."""
        with self._lock:
            feed = Feed(root=root, url_base=url_base.rstrip("/") + "/" if url_base else "", name=name)
            self._dirs[root].feed = feed
            self._dirs[root].ino = root
            return feed

    def add_files(self, feed: Feed, entries: list[tuple[str, int, float, str, str]]) -> None:
        """Append ``(key, size, mtime, url, etag)`` entries; keys must ascend across calls."""
        with self._changed:
            for key, size, mtime, url, etag in entries:
                if key <= feed.cursor:
                    raise ValueError(f"listing not in key order: {key!r} after {feed.cursor!r}")
                self._add_file(feed, key, size, mtime, url, etag)
                feed.cursor = key
            if entries:
                feed.error = None  # a retry is making progress: lookups wait for it again
            self._changed.notify_all()

    def finish_feed(self, feed: Feed) -> None:
        with self._changed:
            feed.done = True
            feed.error = None
            self._changed.notify_all()

    def fail_feed(self, feed: Feed, error: BaseException) -> None:
        """Loading stopped at ``feed.cursor``: names past it are unknown, not absent. Lookups
        there fail with ListingUnavailable (EIO) until the loader's retry adds more; before
        this, they answered ENOENT for files the version holds (chaos soak, seed 26)."""
        with self._changed:
            feed.error = error
            feed.failures += 1
            self._changed.notify_all()

    def list_by_directory(self, feed: Feed, request: Callable[[int, str], None]) -> None:
        """The whole listing stops at ``feed.cursor``: from now on a directory not yet final
        is listed by itself, and ``request(ino, relpath)`` is called (once per directory,
        under the lock) when a lookup or readdir first needs one."""
        with self._changed:
            feed.by_dir = request
            self._changed.notify_all()  # waiters re-check, which asks for their directories

    def listing_start(self, ino: int) -> tuple[str, str]:
        """(prefix, start_after) of directory ``ino``'s own listing: what the whole listing
        already added to it is not listed again."""
        with self._lock:
            d = self._dirs[ino]
            assert d.feed is not None
            prefix = d.relpath + "/" if d.relpath else ""
            cursor = d.feed.cursor
            return prefix, cursor if cursor.startswith(prefix) else ""

    def add_listed(
        self,
        ino: int,
        entries: list[tuple[str, int, float, str, str] | str],
        *,
        done: bool = False,
        error: BaseException | None = None,
    ) -> None:
        """Children of directory ``ino`` from its own listing, in key order: a file as
        ``(name, size, mtime, url, etag)``, a subdirectory as its name. Entries at or before
        the last child already there (the whole listing got them first) are skipped."""
        with self._changed:
            d = self._dirs[ino]
            feed, listing = d.feed, d.listing
            assert feed is not None and listing is not None, "only a directory being listed by itself"
            for entry in entries:
                is_dir = isinstance(entry, str)
                name = entry if is_dir else entry[0]
                probe = name.encode("utf-8", "surrogateescape") + (b"/" if is_dir else b"")
                if not d.children or self._sort_key(d.children[-1]) < probe:
                    relpath = f"{d.relpath}/{name}" if d.relpath else name
                    if is_dir:
                        self._child_dir(ino, name, feed, relpath)
                    else:
                        _, size, mtime, url, etag = entry
                        self._add_leaf(feed, ino, relpath, name, size, mtime, url, etag)
                listing.cursor = name + _PAST_DIR if is_dir else name
            listing.done = done and error is None
            if error is not None:
                listing.error = error
                listing.failures += 1
            self._changed.notify_all()

    def _listing(self, d: _Dir) -> DirListing | None:
        """The directory's own listing; asked for now if the feed lists by directory."""
        if d.listing is None and d.feed is not None and d.feed.by_dir is not None:
            d.listing = DirListing()
            d.feed.by_dir(d.ino, d.relpath)
        return d.listing

    def _ask_again(self, d: _Dir) -> None:
        """A new lookup or readdir of a directory whose own listing failed asks for it again
        (waiters of the failed attempt were told, and do not ask themselves)."""
        listing = d.listing
        if listing is not None and listing.error is not None and not listing.done:
            assert d.feed is not None and d.feed.by_dir is not None
            listing.error = None
            d.feed.by_dir(d.ino, d.relpath)

    def _failures(self, d: _Dir) -> tuple[int, int]:
        if d.feed is None:
            return (0, 0)
        return (d.feed.failures, d.listing.failures if d.listing is not None else 0)

    def _unavailable(self, d: _Dir, name: str | None) -> ListingUnavailable:
        assert d.feed is not None
        feed, listing = d.feed, d.listing
        where = f"{d.relpath}/{name}" if d.relpath and name else (d.relpath or name or "/")
        if listing is not None and listing.failures and feed.by_dir is not None:
            cause = listing.error or "its last attempt failed"
            return ListingUnavailable(
                f"{feed.name or 'this mount'}: listing directory {d.relpath or '/'!r} failed ({cause}); "
                f"{where!r} is unknown, not absent. The next lookup lists it again",
                path=where,
            )
        return ListingUnavailable(
            f"{feed.name or 'this mount'}: its listing stopped before {where!r} "
            f"({feed.error or 'loading failed'}); the name is unknown, not absent. "
            "The mount retries the listing: try again shortly",
            path=where,
        )

    def _add_file(self, feed: Feed, key: str, size: int, mtime: float, url: str, etag: str) -> None:
        dirpath, _, name = key.rpartition("/")
        if dirpath == feed.last_dir and feed.last_dir_ino:
            parent = feed.last_dir_ino  # the common case: the same directory as the previous key
        else:
            parent = feed.root
            relpath = ""
            for part in dirpath.split("/") if dirpath else ():
                relpath = f"{relpath}/{part}" if relpath else part
                parent = self._child_dir(parent, part, feed, relpath)
            feed.last_dir, feed.last_dir_ino = dirpath, parent
        self._add_leaf(feed, parent, key, name, size, mtime, url, etag)

    def _add_leaf(
        self, feed: Feed, parent: int, key: str, name: str, size: int, mtime: float, url: str, etag: str
    ) -> None:
        extra = self._strings.add(etag)
        kind = FILE
        if url == feed.url_base + key:
            kind |= _URL_IS_BASE_PLUS_KEY
        else:
            self._strings.add(url)  # at extra + 1
        self._new_node(parent, name, kind, size, _ns(mtime), extra)
        feed.files += 1
        feed.bytes += size

    def _child_dir(self, parent: int, name: str, feed: Feed, relpath: str) -> int:
        """The directory ``name`` under ``parent``, created if this is its first key."""
        d = self._dirs[parent]
        if d.children:
            last = d.children[-1]
            if self._kind[last] & _KIND_MASK == DIR and self._names(last) == name:
                return last
        shadowed = self._find_kind(d, name, FILE)
        if shadowed is not None:  # "a" then "a/b": the directory wins, the file is hidden
            self._kind[shadowed] |= _HIDDEN
            feed.shadowed += 1
            feed.files -= 1
            feed.bytes -= self._size[shadowed]
        ino = self._new_node(parent, name, DIR, 0, self._mtime[feed.root], 0)
        self._dirs[ino] = _Dir(feed=feed, relpath=relpath, ino=ino)
        return ino

    def _new_node(self, parent: int, name: str, kind: int, size: int, mtime_ns: int, extra: int) -> int:
        ino = len(self._parent)
        self._parent.append(parent)
        self._kind.append(kind)
        self._name.append(self._strings.add(name))
        self._size.append(size)
        self._mtime.append(mtime_ns)
        self._extra.append(extra)
        self._dirs[parent].children.append(ino)
        return ino

    # --- reading -------------------------------------------------------------------------------
    def _names(self, ino: int) -> str:
        return self._strings.get(self._name[ino])

    def _sort_key(self, ino: int) -> bytearray:
        """UTF-8 bytes order equals code point order, so bytes compare like the keys did."""
        name = self._strings.get_bytes(self._name[ino])
        return name + b"/" if self._kind[ino] & _KIND_MASK == DIR else name

    def _final(self, d: _Dir, name: str) -> bool:
        if d.feed is None:
            return True
        if d.feed.final(f"{d.relpath}/{name}" if d.relpath else name):
            return True
        listing = self._listing(d)
        return listing is not None and (listing.done or listing.cursor >= name + _CHILD_SEP)

    def is_dir(self, ino: int) -> bool:
        return ino in self._dirs

    def lookup(self, parent: int, name: str, timeout: float | None = None) -> int | None:
        """Inode of ``name`` in directory ``parent``, or None; waits while the answer may change.

        Callers on an event loop should call :meth:`lookup_now` first and only run this
        (blocking) variant in a worker thread when that returns ``...``.
        """
        with self._changed:
            d = self._dirs.get(parent)
            if d is None:
                return None
            self._ask_again(d)
            seen = self._failures(d)

            def settled() -> bool:
                final = self._final(d, name)  # may ask for the directory's listing (again)
                return final or self._failures(d) != seen or (d.feed is not None and d.feed.error is not None)

            self._changed.wait_for(settled, timeout)
            if not self._final(d, name):  # the listing failed (or ``timeout`` passed) short of it
                raise self._unavailable(d, name)
            return self._find(d, name)

    def lookup_now(self, parent: int, name: str) -> object:
        """Like :meth:`lookup` but never blocks: ``...`` means "not final yet, wait"."""
        with self._lock:
            d = self._dirs.get(parent)
            if d is None:
                return None
            self._ask_again(d)
            if not self._final(d, name):
                if d.feed is not None and d.feed.error is not None:
                    raise self._unavailable(d, name)
                return ...
            return self._find(d, name)

    def _find(self, d: _Dir, name: str) -> int | None:
        found = self._find_kind(d, name, DIR)
        return found if found is not None else self._find_kind(d, name, FILE)

    def _find_kind(self, d: _Dir, name: str, kind: int) -> int | None:
        """Binary search among children by sort key (symlinks count as files)."""
        probe = name.encode("utf-8", "surrogateescape") + (b"/" if kind == DIR else b"")
        children = d.children
        i = bisect_left(children, probe, key=self._sort_key)
        while i < len(children) and self._sort_key(children[i]) == probe:
            if not self._kind[children[i]] & _HIDDEN:
                return children[i]
            i += 1
        return None

    def attr(self, ino: int) -> Attr:
        with self._lock:
            return Attr(self._kind[ino] & _KIND_MASK, self._size[ino], self._mtime[ino])

    def exists(self, ino: int) -> bool:
        return 0 < ino < len(self._parent)

    def name(self, ino: int) -> str:
        with self._lock:
            return self._names(ino)

    def readlink(self, ino: int) -> str:
        with self._lock:
            symlinks = self._dirs[self._parent[ino]].symlinks or {}
            return symlinks[ino]

    def readdir(self, ino: int, start: int, *, wait: bool = False) -> list[tuple[str, int, int]]:
        """Children from index ``start`` on that are final, as (name, inode, next index).

        With ``wait`` (worker threads only) it blocks until at least one more final child
        that is shown exists or the directory is complete; an empty list then means the end.
        A final child may be hidden (a file shadowed by a directory of its name): while a
        directory is listed by itself, its final children can be that file alone, and
        answering no entry for it ended the directory for the kernel (integrity15).
        """
        with self._changed:
            d = self._dirs[ino]
            self._ask_again(d)
            seen = self._failures(d)

            def ready() -> bool:  # reads ``start`` as it is at each call
                if self._final_count(d) > start or self._complete(d):
                    return True
                return self._failures(d) != seen or (d.feed is not None and d.feed.error is not None)

            while True:
                if wait:
                    self._changed.wait_for(ready)
                n = self._final_count(d)
                if wait and n <= start and not self._complete(d):  # failed short of the next entry
                    raise self._unavailable(d, None)
                shown = [
                    (self._names(c), c, i + 1)
                    for i, c in enumerate(d.children[start:n], start)
                    if not self._kind[c] & _HIDDEN
                ]
                if shown or not wait or n <= start:
                    return shown
                start = n  # only hidden children so far: wait for the next ones

    def dir_complete(self, ino: int) -> bool:
        with self._lock:
            return self._complete(self._dirs[ino])

    def _complete(self, d: _Dir) -> bool:
        if d.feed is None:
            return True
        if d.feed.done or (d.relpath != "" and d.feed.cursor >= d.relpath + _CHILD_SEP):
            return True
        listing = self._listing(d)
        return listing is not None and listing.done

    def _final_count(self, d: _Dir) -> int:
        """How many leading children can no longer change (all but possibly the last)."""
        n = len(d.children)
        if n and not self._final(d, self._names(d.children[n - 1])):
            n -= 1
        return n

    def key(self, ino: int) -> str:
        """The record key of a file, relative to its version directory."""
        with self._lock:
            return self._key(ino)

    def _key(self, ino: int) -> str:
        parts = []
        while ino not in self._dirs or self._dirs[ino].feed is None or self._dirs[ino].relpath:
            parts.append(self._names(ino))
            ino = self._parent[ino]
        return "/".join(reversed(parts))

    def _feed_of(self, ino: int) -> Feed:
        parent = self._parent[ino]
        feed = self._dirs[parent].feed
        assert feed is not None, "files only exist below a feed"
        return feed

    def ref(self, ino: int) -> ObjectRef:
        """What the cache needs to read file ``ino``: URL, etag and size."""
        with self._lock:
            kind = self._kind[ino]
            if kind & _KIND_MASK != FILE:
                raise IsADirectoryError(ino)
            etag_index = self._extra[ino]
            if kind & _URL_IS_BASE_PLUS_KEY:
                url = self._feed_of(ino).url_base + self._key(ino)
            else:
                url = self._strings.get(etag_index + 1)
            return ObjectRef(url, self._strings.get(etag_index), self._size[ino])

    def walk_files(self, root: int, *, shadowed: bool = False) -> Iterator[tuple[str, ObjectRef, int]]:
        """(key, ref, mtime_ns) of every file below ``root`` in key order (for snapshots).

        ``shadowed``: also the files a directory of their name hides (``a`` beside ``a/b``),
        each in its place in key order (before the directory's own keys). Why: a bucket's
        snapshot records its listing exactly (docs/fuse.md, "Bucket snapshots"), and a
        version may hold both keys (docs/catalog.md); the whole-listed snapshot left such a
        file out, so the same bucket's snapshot lost objects of the bucket (and a later one
        listed by directory, which keeps them, put them back) by the bucket's size alone."""
        stack = [iter(self._walked(root, shadowed))]
        while stack:
            for ino in stack[-1]:
                if self.is_dir(ino):
                    stack.append(iter(self._walked(ino, shadowed)))
                    break
                if self.attr(ino).kind == FILE:
                    yield self.key(ino), self.ref(ino), self.attr(ino).mtime_ns
            else:
                stack.pop()

    def _walked(self, ino: int, shadowed: bool) -> list[int]:
        """The final children of directory ``ino`` in key order: those shown (``readdir``),
        or with ``shadowed`` every one, hidden files too."""
        if not shadowed:
            return [child for _name, child, _next in self.readdir(ino, 0)]
        with self._lock:
            d = self._dirs[ino]
            return list(d.children[: self._final_count(d)])

    # --- accounting --------------------------------------------------------------------------
    def inode_count(self) -> int:
        return len(self._parent) - 1

    def nbytes(self) -> int:
        """Approximate memory of the index (arrays + strings + directory objects)."""
        arrays = (self._parent, self._kind, self._name, self._size, self._mtime, self._extra)
        total = sum(a.itemsize * len(a) for a in arrays) + self._strings.nbytes()
        total += sum(200 + d.children.itemsize * len(d.children) for d in self._dirs.values())
        return total


def _ns(seconds: float | None) -> int:
    return int((time.time() if seconds is None else seconds) * 1e9)
