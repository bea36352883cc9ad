"""The cache's side of FUSE passthrough: which objects have a backing file, and handing it out.

Why an object of its own: a mount asks the cache, at every OPEN, for a file the kernel can
serve the object from without the daemon. Only an object of one page that the disk tier
holds has one (its page file is the object's bytes from offset 0, ``datahub.cache.disk``
format 3), and ``datahub.cache.backing.BackingFiles`` verifies such a file before it is
handed out (promise 2). What is left, and lives here, is the object-level policy around
it: the one-page rule, answering "absent" without a system call when no local tier knows
the page (the FUSE loop asks inline), reading a cold object in at OPEN (``fetch=True``),
and counting an open served by a backing file as a cache hit (eviction and warm-up see
the object in use). With no disk tier every answer is "no backing file".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from datahub.cache.activity import ReaderActivity
from datahub.cache.backing import ABSENT, BackingFiles
from datahub.cache.pages import PageKey, page_key
from datahub.cache.tier import Tier
from datahub.storage.base import ObjectRef


class PassthroughFiles:
    """Backing files of whole objects, for a FUSE mount's passthrough opens."""

    def __init__(
        self,
        backing: BackingFiles | None,
        *,
        page_size: int,
        local_tiers: Sequence[Tier],
        activity: ReaderActivity,
        read: Callable[[ObjectRef], object],
    ) -> None:
        #: the disk tier's verified page files (None: no disk tier, so no backing files)
        self.backing = backing
        self._page_size = page_size
        self._local_tiers = list(local_tiers)
        self._activity = activity
        self._read = read  # the cache's read of a whole object: writes its page file

    def available(self) -> bool:
        """Whether :meth:`fd` can return files at all (a disk tier of format-3 page files)."""
        return self.backing is not None and bool(self.backing.disk.xattr_pages)

    def _key(self, ref: ObjectRef) -> PageKey | None:
        """The page that is the whole object, or None: no backing file for ``ref``."""
        if self.backing is None or not 0 < ref.size <= self._page_size:
            return None
        return page_key(ref, self._page_size, 0)

    def fd(self, ref: ObjectRef, *, verify: bool = True, fetch: bool = False) -> int | None:
        """A read-only descriptor of a disk-tier file holding exactly the verified bytes of
        ``ref`` from offset 0 (the caller closes it), or None: only an object of one page
        that is in the disk tier has one. ``verify=False``: no data read;
        ``datahub.cache.backing.UNVERIFIED`` if it would take one, ``ABSENT`` if the disk
        tier does not hold it. ``fetch=True``: an object it does not hold is read through
        the cache first, which writes its page file (a cold file's first READ done at its
        OPEN, so that the kernel serves even that one: its READs and their reply copies
        never reach the daemon); that read raises as the cache's ``read`` does."""
        backing, key = self.backing, self._key(ref)
        if backing is None or key is None:
            return None
        fd = backing.open(key, ref.size, verify=verify)
        if fd is None and fetch:
            self._read(ref)  # a miss, counted there: no hit for this open
            return backing.open(key, ref.size, verify=verify)  # None: the tier refused it
        if fd is None and not verify and not any(t.known(key) for t in self._local_tiers):
            # No probe of the disk (this runs inline on the FUSE loop, where a system call
            # hands the GIL to the fetch threads): a page another process stored is found
            # by the fetch's read, and passed through. Known but not a backing file: a
            # page in RAM only, or an old-format file, read as it is.
            return ABSENT
        if fd is not None and fd >= 0:
            self.hits([ref])
        return fd

    def hits(self, refs: Iterable[ObjectRef]) -> None:
        """Opens served by backing files (also those answered in pyfuse3's C code, reported
        once a second, a batch of thousands in an epoch): eviction and warm-up see the
        objects in use, as for any cache hit. One call per batch, one lock: each hit was
        ~20 us of daemon CPU on 2 loaded cores, most of an SSD-tier hit's cost (issue 36)."""
        if self.backing is None:
            return
        refs = refs if isinstance(refs, list | tuple) else list(refs)
        self._activity.saw_all(refs)
        size = self._page_size
        self.backing.disk.touch([page_key(ref, size, 0) for ref in refs])

    def unchanged(self, ref: ObjectRef, fd: int) -> bool:
        """Whether ``fd`` (from :meth:`fd`) is still in the state it was verified in: one
        ``fstat``, no data read, no hit counted (``BackingFiles.unchanged``)."""
        key = self._key(ref)
        return key is not None and self.backing is not None and self.backing.unchanged(key, fd)

    def check(self, ref: ObjectRef, fd: int) -> bool:
        """Whether ``fd``, a backing file of ``ref`` handed out before and changed since (e.g.
        evicted), still holds exactly its verified bytes (read whole and checked)."""
        key = self._key(ref)
        return key is not None and self.backing is not None and self.backing.check_held(key, ref.size, fd)

    def watch(self, listener: Callable[[int, int], None]) -> None:
        """Call ``listener(st_dev, st_ino)`` for each backing file the disk tier evicts (from
        the evicting thread), so a mount stops holding it."""
        if self.backing is not None:
            self.backing.listeners.append(listener)

    def stats(self) -> dict | None:
        """The ``backing`` part of the cache's stats, or None without a disk tier."""
        b = self.backing
        if b is None:
            return None
        return {"format3": bool(b.disk.xattr_pages), "verifications": b.verifications, "rejected": b.rejected}
