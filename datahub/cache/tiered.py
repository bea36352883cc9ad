"""TieredCache: the read path over RAM -> disk -> shared -> origin (built by datahub.cache.assembly).

A read is cut into pages. Each page is looked up tier by tier; a hit further down is
promoted into every faster tier, and a miss everywhere is fetched from the origin under
If-Match and stored into every tier (write-through, so a page survives a restart as
soon as it was read once). Concurrent misses of one page merge into one fetch; no lock is
held while any tier or the origin does I/O. RAM overflow demotes pages to disk instead
of dropping them. Every page handed to a reader has the length the object's recorded
size implies, and came either from the origin under its etag or from a tier that
verified its header and checksum.

What to read ahead is decided by one prefetcher (datahub.cache.prefetcher), told of
every read: readahead runs of pages for sequential readers, one streaming origin read per
sequential reader of a large object, a background whole-object fill after repeated random
reads of one.

A background thread runs each tier's eviction between the watermarks, reloads pins
changed by other processes, and writes a stats snapshot for ``datahub cache stats``
(so does a mount reporting its status: ``publish_stats``).

Three registries beside the read path are objects of their own, attributes of the cache:
``pins`` (``datahub.cache.pins``: what eviction must keep), ``passthrough``
(``datahub.cache.passthrough``: backing files for a FUSE mount's passthrough opens) and
``reports`` (``datahub.cache.reports``: what mounts add to the stats).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

from datahub.cache import stats as stats_io
from datahub.cache.activity import ReaderActivity
from datahub.cache.backing import BackingFiles
from datahub.cache.disk import DiskTier
from datahub.cache.fetch_workers import FetchWorkers
from datahub.cache.origin import Origin
from datahub.cache.pages import PageKey, ends, page_count, page_key, page_length
from datahub.cache.passthrough import PassthroughFiles
from datahub.cache.pins import Pins
from datahub.cache.prefetch import HintAhead, PrefetchReport, WarmBudget, WarmUnit, run_prefetch
from datahub.cache.prefetcher import Prefetcher
from datahub.cache.ram import RamTier
from datahub.cache.readahead import MAX_RUN_BYTES, MAX_STREAMS
from datahub.cache.reports import StatusReports
from datahub.cache.shared import SharedTier
from datahub.cache.singleflight import SingleFlight
from datahub.cache.tier import TIER_ERRORS, Tier
from datahub.errors import InvalidInput, ObjectChanged
from datahub.procs import cancel_at_exit
from datahub.storage.base import ObjectRef

log = logging.getLogger(__name__)

__all__ = ["MAX_RUN_BYTES", "MAX_STREAMS", "TieredCache"]


class TieredCache:
    """Built by ``open_cache`` (from a Config) or ``assemble_cache`` (from tiers and an
    origin). The constructor only keeps the parts it is given; ``start`` connects the parts
    that call back into the cache (prefetcher, hint workers, tier hooks) and starts the
    background work."""

    def __init__(
        self,
        tiers: Sequence[Tier],
        origin: Origin,
        *,
        flight: SingleFlight[bytes],
        page_size: int,
        prefetch_concurrency: int,
        pins: Pins | None = None,  # None: pins in memory only
        stats_dir: Path | None = None,
        policy: str = "",
        activity: ReaderActivity,
        fetch_workers: FetchWorkers | None = None,
    ) -> None:
        self.tiers = list(tiers)
        #: worker processes that fetch cold pages into the disk tier (datahub.cache.fetch_workers)
        self.fetch_workers = fetch_workers
        self.origin = origin
        self.page_size = page_size
        self.policy = policy
        self.prefetch_concurrency = prefetch_concurrency
        self.activity = activity  # readers' activity: warm-up holds back large objects while readers are busy
        self._flight = flight
        #: named sets of objects whose pages persistent tiers keep (datahub.cache.pins)
        self.pins = pins if pins is not None else Pins()
        #: what mounts add to ``stats()``: their warm-ups and open modes (datahub.cache.reports)
        self.reports = StatusReports(on_add=self.publish_stats)
        #: backing files for FUSE passthrough opens (datahub.cache.passthrough); start()
        self.passthrough: PassthroughFiles
        self._local_tiers = [t for t in self.tiers if not isinstance(t, SharedTier)]  # contains() is cheap
        self._prefetcher: Prefetcher  # the one owner of read-ahead (datahub.cache.prefetcher); start()
        self._hints: HintAhead  # set by start()
        self._hint_lock = threading.Lock()
        self._hint_order: tuple[int, Sequence[ObjectRef]] = (0, ())  # (generation, refs) for warm-up
        self._stats_dir = stats_dir
        self._stats_lock = threading.Lock()  # one snapshot writer at a time; none after close
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._maintainer: threading.Thread | None = None  # started by start()
        self._pid = os.getpid()  # the process whose cache this is (close)
        #: what closes it at this process's exit (``open_cache``; ``procs.at_exit``), if anything
        self.exit_hook: Callable[[], None] | None = None
        #: opens the same cache afresh in another process (``open_cache`` sets it; ``_here``)
        self.reopen: Callable[[], TieredCache] | None = None
        #: closed with the cache: the stores a cache ``reopen`` made reads through (its own)
        self.owned_stores: Any = None
        self._forked: TieredCache | None = None  # in a forked child: the child's own (``_here``)

    def start(self, prefetcher: Prefetcher, hints: HintAhead, *, maintain_interval: float) -> TieredCache:
        """Connect the parts built around this cache, load the pins, start the maintainer."""
        self._prefetcher, self._hints = prefetcher, hints
        disk = next((t for t in self.tiers if isinstance(t, DiskTier)), None)
        self.passthrough = PassthroughFiles(
            BackingFiles(disk) if disk is not None else None,
            page_size=self.page_size,
            local_tiers=self._local_tiers,
            activity=self.activity,
            read=self.read,
        )
        self._attach_tiers()
        self.pins.reload()
        self._maintainer = threading.Thread(
            target=self._maintain_loop, args=(maintain_interval,), name="datahub-cache-maintain", daemon=True
        )
        self._maintainer.start()
        return self

    def _attach_tiers(self) -> None:
        """Give the tiers their hooks into the cache (declared on ``Tier``): wake the
        evictor, pins, demotion."""
        for i, tier in enumerate(self.tiers):
            tier.wake_evictor = self._wake.set
            if tier.persistent:  # pins hold pages on disk, not in RAM
                tier.is_pinned = self.pins.holds
            if i == 0 and len(self.tiers) > 1:
                tier.on_evict = self._demote

    def _here(self) -> TieredCache:
        """The cache that serves this process: itself where it was built; in a forked child
        (a DataLoader worker reading through a cache its parent opened and kept in a Dataset),
        the child's own, opened on first use from the same configuration (``reopen``).

        Why: the parts are the parent's. A page a parent thread was fetching at the fork was
        waited for in the single flight, whose leader does not exist in the child (the read
        hung); and the child read and wrote through the parent's LMDB handle, scheduler slots
        and pooled connections."""
        if self._pid == os.getpid():
            return self
        with _FORKED_LOCK:
            own = self._forked
            if own is None or own._pid != os.getpid():
                if self.reopen is None:
                    raise InvalidInput(
                        f"this cache was opened in process {self._pid} and cannot be read in process "
                        f"{os.getpid()} (a forked child): built from tiers (assemble_cache), it has no "
                        "configuration to open the child's own. Open the cache in each process "
                        "(open_cache, or datahub.torch.CacheSource, which does)"
                    )
                own = self._forked = self.reopen()
            return own

    # --- reads -------------------------------------------------------------------------------------
    def read(
        self,
        ref: ObjectRef,
        offset: int = 0,
        size: int | None = None,
        *,
        view: bool = False,
        reader: Hashable = None,
    ) -> bytes | memoryview:
        """Verified bytes ``[offset, offset+size)`` of the object version ``ref`` names.

        Raises ObjectChanged / ObjectNotFound from the origin; never returns wrong bytes.
        ``view=True`` may return a read-only memoryview into a cached page instead of a
        copy (pages are immutable ``bytes``): the FUSE daemon hands it to the kernel as is,
        which saves copying every byte of a large file once more. ``reader`` names who
        reads (e.g. a FUSE file handle) so that the prefetcher tells sequential readers of
        one object apart; None: all readers of an object count as one.
        """
        if self._pid != os.getpid():
            return self._here().read(ref, offset, size, view=view, reader=reader)
        if offset < 0 or (size is not None and size < 0):
            raise InvalidInput(f"invalid read of {ref.url}: offset {offset} and size {size} must be >= 0")
        end = ref.size if size is None else min(ref.size, offset + size)
        if offset >= end:
            return b""
        ps = self.page_size
        first, last = offset // ps, (end - 1) // ps
        self.activity.saw(ref)
        plan = self._prefetcher.before_read(ref, offset, first, last, reader)
        parts: list[bytes | memoryview] = []
        for i in range(first, last + 1):
            key = page_key(ref, ps, i)
            page = self._page(key, page_length(ref, ps, i), to_end=ends(ref, key))
            parts.append(_part(page, i * ps, offset, end))
        self._hints.consumed_ref(ref)
        self._prefetcher.after_read(ref, last, plan)
        if len(parts) == 1:
            return parts[0] if view or isinstance(parts[0], bytes) else bytes(parts[0])
        return b"".join(parts)

    def read_cached(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None
    ) -> bytes | memoryview | None:
        """The bytes if they are in RAM now, else None: then use ``read``.

        Never does I/O or waits, so an event loop may answer from it inline: the FUSE
        daemon serves a warm file without a hop to a worker thread. A larger object is
        answered only while a sequential stream follows its reader (the stream is told
        where the reader is, in memory); any other read of it takes ``read``, which keeps
        readahead, fills and new streams informed.
        """
        if self._pid != os.getpid():
            return self._here().read_cached(ref, offset, size)
        ram = self.tiers[0] if self.tiers else None
        if not isinstance(ram, RamTier) or offset < 0:
            return None
        self.activity.saw(ref)
        if ref.size > self.page_size:
            return self._read_streamed_now(ram, ref, offset, size)
        end = ref.size if size is None else min(ref.size, offset + max(0, size))
        key = page_key(ref, self.page_size, 0)
        if not ram.holds(key):
            return None
        data = ram.get(key)
        if data is None or len(data) != ref.size:
            return None
        self._hints.consumed_ref(ref)
        return data if offset == 0 and end == len(data) else data[offset:end]

    def _read_streamed_now(
        self, ram: RamTier, ref: ObjectRef, offset: int, size: int | None
    ) -> bytes | memoryview | None:
        end = ref.size if size is None else min(ref.size, offset + max(0, size))
        if offset >= end:
            return b""
        ps = self.page_size
        first, last = offset // ps, (end - 1) // ps
        keys = [page_key(ref, ps, i) for i in range(first, last + 1)]
        if not all(ram.holds(k) for k in keys) or not self._prefetcher.note_read_now(ref, first, last):
            return None
        parts: list[bytes | memoryview] = []
        for i, key in zip(range(first, last + 1), keys, strict=True):
            page = ram.get(key)
            if page is None or len(page) != page_length(ref, ps, i):
                return None  # evicted meanwhile (or damaged): ``read`` deals with it
            parts.append(_part(page, i * ps, offset, end))
        self._hints.consumed_ref(ref)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _page(self, key: PageKey, expected: int, *, to_end: bool, hot: bool = False) -> bytes:
        """Page ``key`` of a record that gives it ``expected`` bytes; ``to_end``: it is the
        record's last page (an origin read checks the object ends there, ``read_range``)."""
        if self.tiers:
            data = self.tiers[0].get(key)
            if data is not None:
                if len(data) == expected:
                    return data
                self._wrong_length(self.tiers[0], key, data, expected)
        led = False

        def lead() -> bytes:
            nonlocal led
            led = True
            return self._load_below(key, expected, hot, to_end)

        # Merged into a fetch of this page (a reader's, a readahead run's, a stream's) for a
        # record that claims another size for the same object version: its page, or its
        # ObjectChanged, was checked against its record, not ours (a shorter record's fetch
        # fails where ours reads). Load it for ours, which checks the length (review15c).
        try:
            data = self._flight.do(key, lead)
        except ObjectChanged:
            if led:
                raise
            data = None
        if data is not None and len(data) == expected:
            return data
        return self._load_below(key, expected, hot, to_end)

    def _load_below(self, key: PageKey, expected: int, hot: bool, to_end: bool) -> bytes:
        # Leading the fetch now, but a stream may have delivered the page between the
        # caller's miss and this: it is in the fastest tier, and fetching it again would be
        # a second origin request for bytes the cache holds.
        wrong: list[Tier] = []  # tiers holding the page with another length than expected
        if self.tiers and self.tiers[0].known(key):
            data = self.tiers[0].get(key)
            if data is not None:
                if len(data) == expected:
                    return data
                wrong.append(self.tiers[0])
        for i in range(1, len(self.tiers)):
            tier = self.tiers[i]
            data = tier.get(key)
            if data is None:
                continue
            if len(data) != expected:
                self._wrong_length(tier, key, data, expected)
                wrong.append(tier)
                continue
            for upper in self.tiers[:i]:
                upper.put(key, data, reason="promote", hot=hot)
            return data
        data = self._from_origin(key, expected, self.tiers, to_end=to_end, hot=hot)[0]
        # The origin's bytes agree with the record (its length check raised otherwise): the
        # held page of another length was damaged, not the record. ``put`` left it alone as
        # held; replace it, or it outlives the origin and fails the object's own record.
        for tier in wrong:
            if len(data) == expected and tier.replace(key, data):
                log.warning(
                    "%s tier: page %d of %s (etag %s) replaced by the origin's %d bytes, which agree "
                    "with the record",
                    tier.name,
                    key.index,
                    key.url,
                    key.etag,
                    expected,
                )
        return data

    def _from_origin(
        self, key: PageKey, expected: int, keep: Sequence[Tier], *, to_end: bool, hot: bool = False
    ) -> tuple[bytes, list[Tier]]:
        """Fetch a page and store it in the tiers ``keep``: the bytes, and the tiers that
        refused them (warm-up's budget wants to know). A fetch worker, if any (and if the
        disk tier is among ``keep`` and takes the page), reads it and writes the disk file
        in another process; else, or if the worker did not finish, this process does both."""
        start = key.index * self.page_size
        workers = self.fetch_workers
        if workers is not None and workers.disk in keep:
            data = workers.fetch_page(self.origin, key, start, start + expected, to_end=to_end, hot=hot)
            if data is not None:
                rest = [t for t in keep if t is not workers.disk]
                return data, [t for t in rest if not t.put(key, data, reason="fill", hot=hot)]
        data = self.origin.fetch(key, start, start + expected, to_end=to_end)
        return data, [t for t in keep if not t.put(key, data, reason="fill", hot=hot)]

    def _wrong_length(self, tier: Tier, key: PageKey, data: bytes, expected: int) -> None:
        """A tier's page has another length than the record being read expects.

        Why it is neither removed nor counted as corrupt: every tier hands out only pages
        that passed their checks (checksum, header naming this page), and a page is named by
        the object's (URL, etag), so it holds the object's bytes; the record claiming another
        size is what disagrees with the object. Removing the page cost the object's own
        records a refetch (and a passthrough open of theirs), and made a bad record look
        like a damaged cache. The read goes on to the origin, whose length check raises
        ObjectChanged, as before. Only if the origin's bytes agree with the record is the
        page the damaged one (whole and consistent, yet short or long: outside damage), and
        ``_load_below`` then replaces it with those bytes."""
        log.warning(
            "%s tier: page %d of %s (etag %s) has %d bytes, the record being read expects %d: the "
            "record disagrees with its object; the origin is asked (the page stays unless its bytes agree with the record)",
            tier.name,
            key.index,
            key.url,
            key.etag,
            len(data),
            expected,
        )

    def _demote(self, key: PageKey, data: bytes) -> None:
        """RAM evicted ``key``: keep it in the next tier down unless it is there already."""
        below = self.tiers[1]
        if not below.contains(key):
            below.put(key, data, reason="demote")

    def _cached_locally(self, key: PageKey) -> bool:
        return any(t.contains(key) for t in self._local_tiers)

    def _keep(self, key: PageKey, data: bytes, hot: bool, *, first: bool) -> None:
        """Store a streamed page in the fastest tier (``first``) or in the others."""
        for tier in self.tiers[:1] if first else self.tiers[1:]:
            tier.put(key, data, reason="fill", hot=hot)

    # --- warming -----------------------------------------------------------------------------------
    def _warm(self, unit: WarmUnit, cancel: threading.Event) -> tuple[int, int, int]:
        """Bring pages ``unit.first..last`` of ``unit.ref`` in unless a tier holds them.

        Any tier counts (RAM, disk, shared), local ones asked first (cheap), so warming a
        cached version makes no origin request. Fetched pages go to the tiers the pass's
        budget chose (``unit.keep``; every tier without a budget). ``cancel`` is checked
        before each page: a cancelled pass fetches at most the page under way.
        """
        ref, ps = unit.ref, self.page_size
        fetched = cached = nbytes = 0
        for i in range(unit.first, min(unit.last, page_count(ref.size, ps) - 1) + 1):
            if cancel.is_set():
                break
            key = page_key(ref, ps, i)
            if self._held(key):
                cached += 1
                continue
            n = page_length(ref, ps, i)
            keep = self.tiers if unit.keep is None else unit.keep
            led: list[bool] = []  # whether this pass fetched the page, or merged into a reader's fetch

            def fill(k: PageKey = key, n: int = n, keep=keep, led: list[bool] = led) -> bytes:
                led.append(True)
                # readers merged into this flight take these bytes
                return self._fill(k, n, keep, unit.budget, to_end=ends(ref, k))

            # The slot first, then the single flight: a reader who merges into this fetch
            # never waits behind warm-up's place in the origin queue (scheduler.slot).
            with self.origin.scheduler.slot(n, sample=False):
                self._flight.do(key, fill)
            if led:
                fetched += 1
                nbytes += n
            else:  # a reader's fetch of the page was under way: it brought the page in, not us
                cached += 1
        return fetched, cached, nbytes

    def _held(self, key: PageKey) -> bool:
        """Whether any tier holds ``key``: local tiers first, the shared one (a HEAD) last."""
        return any(t.contains(key) for t in self._local_tiers) or any(
            t.contains(key) for t in self.tiers if isinstance(t, SharedTier)
        )

    def _fill(
        self,
        key: PageKey,
        expected: int,
        keep: Sequence[Tier],
        budget: WarmBudget | None = None,
        *,
        to_end: bool,
    ) -> bytes:
        """Fetch a page from the origin and store it in the tiers ``keep`` (warm-up).

        Looks in the local tiers once more first: a reader's stream or read-ahead may have
        stored the page since ``_held`` was asked, and fetching it again would send its
        bytes twice.
        """
        for tier in self._local_tiers:
            if tier.contains(key):
                data = tier.get(key)
                if data is not None and len(data) == expected:
                    return data
        data, refused = self._from_origin(key, expected, keep, to_end=to_end)
        if budget is not None:
            for tier in refused:
                budget.refused(tier)  # full of pages it prefers: warm-up stops using it
        return data

    def _warm_hot(self, ref: ObjectRef) -> None:
        """Bring every page of ``ref`` into the fastest tier (it is about to be read)."""
        for i in range(page_count(ref.size, self.page_size)):
            key = page_key(ref, self.page_size, i)
            if self.tiers and self.tiers[0].contains(key):
                continue
            n, last = page_length(ref, self.page_size, i), ends(ref, key)
            if self._cached_locally(key):  # a promotion: no origin slot needed
                self._flight.do(key, lambda k=key, n=n, e=last: self._load_below(k, n, True, e))
                continue
            # The slot first, then the single flight, as in _warm: a reader never waits
            # behind a hinted fetch's place in the origin queue.
            with self.origin.scheduler.slot(n, sample=False):
                self._flight.do(key, lambda k=key, n=n, e=last: self._load_below(k, n, True, e))

    def prefetch(
        self,
        refs: Iterable[ObjectRef],
        *,
        progress=None,
        cancel: threading.Event | None = None,
    ) -> PrefetchReport:
        """Warm ``refs`` so that it never hurts readers (datahub.cache.prefetch ``run_prefetch``).

        At warm-up priority, with ``prefetch_concurrency`` workers; skips what any tier holds
        (a rerun over a cached version makes no request, one after an interruption resumes);
        small objects first, large ones last in one-page parts, each once a reader opened it
        or the readers have been idle ``activity.idle_seconds``; only what fits the tiers'
        budgets (the report says ``budget_reached``); objects a reader announced (``hint``)
        first. ``progress`` is anything with ``update(n, nbytes)``
        (datahub.console.context.Progress); setting ``cancel`` stops it after the pages in flight.
        """
        if self._pid != os.getpid():
            return self._here().prefetch(refs, progress=progress, cancel=cancel)
        cancel = cancel or threading.Event()
        return run_prefetch(
            refs,
            lambda unit: self._warm(unit, cancel),
            concurrency=self.prefetch_concurrency,
            progress=progress,
            cancel=cancel,
            page_size=self.page_size,
            budget=WarmBudget(self.tiers),
            hinted=self._hinted_order,
            hold=self.activity.hold,
        )

    def warm_room(self) -> int:
        """The most bytes a warm-up pass may bring in without any tier evicting one of them
        (``WarmBudget``: below the low watermark of a tier that keeps pages)."""
        if self._pid != os.getpid():
            return self._here().warm_room()
        return WarmBudget(self.tiers).capacity()

    def holds(self, ref: ObjectRef) -> bool:
        """Whether a local tier holds the first page of ``ref`` (no I/O beyond an index look-up)."""
        if self._pid != os.getpid():
            return self._here().holds(ref)
        return self._cached_locally(page_key(ref, self.page_size, 0))

    def hint(self, refs: Sequence[ObjectRef]) -> None:
        """The reader will read ``refs`` in this order: fetch ahead within hint_budget_bytes.

        A warm-up pass running meanwhile takes this order first.
        """
        if self._pid != os.getpid():
            return self._here().hint(refs)
        with self._hint_lock:
            self._hint_order = (self._hint_order[0] + 1, refs)
        self._hints.set(refs)

    def _hinted_order(self) -> tuple[int, Sequence[ObjectRef]]:
        return self._hint_order

    # --- maintenance and stats ---------------------------------------------------------------------
    def maintain(self) -> None:
        """One round of background work (tests call it directly to be deterministic)."""
        try:
            self.pins.reload()
        except TIER_ERRORS as exc:  # the disk index (LMDB) failed: keep the pins we had
            log.warning("cache: reloading pins failed: %s", exc)
        for tier in self.tiers:
            try:
                tier.maintain()
            except TIER_ERRORS as exc:  # one tier's failure must not skip the others
                log.warning("cache: maintenance of the %s tier failed: %s", tier.name, exc)
        self.publish_stats()

    def publish_stats(self) -> None:
        """Write this process's stats snapshot (``datahub cache stats`` and /metrics read it).

        Each maintenance round does, and so does a mount or warm-up when it reports
        (``reports``): without that, a mount served within the first maintenance interval was
        missing from ``datahub cache stats`` until the next round. Under a lock: the
        maintainer and a reporting thread share one temp file, and no snapshot is written
        after ``close`` removed it (nor before ``start``: ``stats()`` needs its parts)."""
        if self._stats_dir is None:
            return
        with self._stats_lock:
            if self._closed.is_set() or self._maintainer is None:
                return
            try:
                stats_io.write_snapshot(self._stats_dir, self.stats())
            except OSError as exc:
                log.debug("cache: writing the stats snapshot failed: %s", exc)

    def _maintain_loop(self, interval: float) -> None:
        while not self._closed.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                self.maintain()
            except Exception:  # the maintainer thread's top level: a bug must not end eviction
                log.exception("cache: maintenance round failed unexpectedly")

    def stats(self) -> dict:
        if self._pid != os.getpid():
            return self._here().stats()
        return {
            "pid": os.getpid(),
            "time": time.time(),
            "page_size": self.page_size,
            "policy": self.policy,
            "tiers": [t.stats() for t in self.tiers],
            "origin": self.origin.stats(),
            "merged_fetches": self._flight.merged,
            **self._prefetcher.stats(),  # "readahead" (runs' queue) and "streams"
            "hints": self._hints.stats(),
            "pinned_objects": len(self.pins),
            **self.reports.snapshot(),  # "warmups" and "mounts"
            **({"backing": backing} if (backing := self.passthrough.stats()) is not None else {}),
            **({"fetch_workers": self.fetch_workers.stats()} if self.fetch_workers is not None else {}),
        }

    def close(self) -> None:
        """Stop the background work, then close the fetch workers and the tiers.

        In a forked child (a DataLoader worker) it only marks this copy closed. Why: the
        parts are the parent's: closing them stopped the parent's fetch worker processes (by
        pid), unregistered its claim on the disk index and waited on its threads' locks."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._pid != os.getpid():
            with _FORKED_LOCK:
                own, self._forked = self._forked, None
            if own is not None and own._pid == os.getpid():
                own.close()  # the child's own (``_here``)
            return
        if self.exit_hook is not None:
            cancel_at_exit(self.exit_hook)
        self._wake.set()
        if self._maintainer is not None:
            self._maintainer.join(timeout=10)
        for part in (getattr(self, "_hints", None), getattr(self, "_prefetcher", None)):
            if part is not None:  # None: never started (a constructed, unstarted cache)
                part.close()
        if self.fetch_workers is not None:  # before the tiers: no worker writes into a closed tier
            self.fetch_workers.close()
        for tier in self.tiers:
            try:
                tier.close()
            except TIER_ERRORS as exc:  # close the other tiers anyway
                log.warning("cache: closing the %s tier failed: %s", tier.name, exc)
        if self._stats_dir is not None:
            with self._stats_lock:  # after a snapshot being written now
                stats_io.remove_snapshot(self._stats_dir)
        if self.owned_stores is not None:
            self.owned_stores.close()

    def __enter__(self) -> TieredCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FORKED_LOCK = threading.Lock()  # opens a forked child's own cache once (``TieredCache._here``)


def _after_fork_in_child() -> None:
    """A fresh lock: a parent thread may have held it at the fork."""
    global _FORKED_LOCK
    _FORKED_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _part(page: bytes, page_start: int, offset: int, end: int) -> bytes | memoryview:
    """The bytes of ``[offset, end)`` that lie in a page starting at ``page_start``: the page
    itself when wholly inside, else a view into it (no copy)."""
    lo, hi = max(0, offset - page_start), min(len(page), end - page_start)
    return page if lo == 0 and hi == len(page) else memoryview(page)[lo:hi]
