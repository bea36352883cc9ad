"""The tier contract and the byte-budgeted base the RAM and disk tiers share.

A tier stores pages and answers ``get(key) -> bytes | None``, ``put(key, data) -> bool``,
``delete``, ``contains`` and ``usage``. It is an optimisation: a failing tier is a miss
(get) or a refusal (put), counted and logged, never raised to a reader. ONE wrapper owns
that rule, ``tier_failure``: every tier's backend I/O runs inside it. It catches what a
backend raises when it fails (``TIER_ERRORS``: OSError, lmdb.Error and the project's own
errors, which the storage layer raises for every store failure) and nothing else, so a
programming error in a tier (TypeError, AttributeError, KeyError, ...) reaches the caller
instead of becoming a silent miss.

``BudgetedTier`` derives everything else from three storage hooks (``_load``, ``_store``,
``_discard``): byte accounting, the eviction policy, pins, the admission filter and
eviction between the watermarks. The lock guards bookkeeping only; every hook runs
outside it, so a slow disk never blocks readers of other pages. Reusable as is by the
write-back engineer (e.g. a small RAM tier in front of the shared tier).
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import lmdb

from datahub.cache.counters import Counters
from datahub.cache.pages import PageKey
from datahub.cache.policy import EvictionPolicy
from datahub.errors import DatahubError

log = logging.getLogger(__name__)

# What a tier's backend raises when it fails: the file system and the disk index (OSError,
# lmdb.Error) and the storage layer behind the shared tier (its errors are DatahubErrors).
TIER_ERRORS: tuple[type[BaseException], ...] = (OSError, lmdb.Error, DatahubError)

# op -> (what was being done, what the failure means for the caller)
_OPS = {
    "read": ("reading", "treated as a miss"),
    "store": ("storing", "not cached"),
    "delete": ("deleting", "left to eviction"),
    "evict": ("evicting", "left in place"),
    "demote": ("demoting", "dropped"),
    "check": ("checking", "treated as absent"),
    "list": ("listing", "eviction skipped"),
}


class TierCounters(Counters):
    FIELDS = (
        "hits",
        "misses",
        "evictions",
        "promotions",  # pages copied up into this tier after a hit further down
        "demotions",  # pages moved down into this tier when a faster tier evicted them
        "fills",  # pages stored after an origin fetch
        "rejected",  # puts refused (admission filter, too big, tier full of pins)
        "errors",  # tier failures turned into misses
        "corrupt",  # pages that failed verification and were removed
    )


class tier_failure:
    """The one place where a failing tier becomes a miss: counted, logged once, swallowed.

    ``with tier_failure(tier, op, key) as failure:`` runs backend I/O; if it raises one of
    ``TIER_ERRORS`` the block ends, ``failure.failed`` is True, ``tier.counters.errors`` grows
    by one (unless ``counted=False``: for steps whose failure costs nothing, like a delete
    eviction retries) and one warning names the tier, the operation and the page. Any other
    exception is a bug and propagates. A class, not a generator: this runs on every page
    read, and a class costs a third of a ``contextlib.contextmanager``.
    """

    __slots__ = ("tier", "op", "key", "counted", "failed")

    def __init__(self, tier: Tier, op: str, key: PageKey | str, *, counted: bool = True) -> None:
        self.tier, self.op, self.key, self.counted = tier, op, key, counted
        self.failed = False

    def __enter__(self) -> tier_failure:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        if exc is None or not isinstance(exc, TIER_ERRORS):
            return False
        self.failed = True
        if self.counted:
            self.tier.counters.add("errors")
        doing, meaning = _OPS[self.op]
        what = f"page {self.key.index} of {self.key.url}" if isinstance(self.key, PageKey) else self.key
        log.warning("%s tier: %s %s failed (%s); %s", self.tier.name, doing, what, exc, meaning)
        return True


@dataclass(frozen=True)
class TierUsage:
    used: int
    limit: int
    entries: int


def _never_pinned(key: PageKey) -> bool:
    return False


def _no_evictor() -> None:
    return None


class Tier(abc.ABC):
    """One level of the cache. Implementations never raise from get/put/contains/delete.

    Besides the storage contract, every tier has the same hooks and budget attributes, with
    defaults here, so the cache connects and asks any tier the same way instead of probing
    which one has what. The cache sets the hooks in ``TieredCache.start``:

    - ``wake_evictor()``: the tier went over its high watermark; the cache's maintainer
      runs ``maintain`` soon. Default: nothing (a tier that never calls it).
    - ``is_pinned(key)``: whether a pin holds the page (``datahub.cache.pins``); a tier
      that evicts never chooses such a page. Set on persistent tiers only: pins keep
      pages on disk, not in RAM. Default: nothing is pinned.
    - ``on_evict(key, data)``: receives pages the fastest tier evicts with their bytes at
      hand, so they are demoted to the next tier instead of dropped. Default: None.

    ``budget`` (bytes; 0: none) and the watermarks ``high`` and ``low`` (fractions of the
    limit; 1.0: none) are what warm-up and whole-object fills size themselves by.
    """

    name: str
    persistent: bool = False  # survives a restart (disk, shared)
    budget: int = 0
    high: float = 1.0
    low: float = 1.0

    def __init__(self) -> None:
        self.counters = TierCounters()
        self.wake_evictor: Callable[[], None] = _no_evictor
        self.is_pinned: Callable[[PageKey], bool] = _never_pinned
        self.on_evict: Callable[[PageKey, bytes], None] | None = None

    @abc.abstractmethod
    def get(self, key: PageKey) -> bytes | None:
        """The page's verified bytes, or None (absent, corrupt or failing: all misses)."""

    @abc.abstractmethod
    def put(self, key: PageKey, data: bytes, *, reason: str = "fill", hot: bool = False) -> bool:
        """Store a page; False if refused. ``reason``: fill | promote | demote (for counters).

        ``hot`` skips the admission filter (the page was asked for by a hint and is about
        to be read).
        """

    def replace(self, key: PageKey, data: bytes, *, reason: str = "fill") -> bool:
        """Store ``data`` over a page this tier holds with another length; False if refused.

        Why: a page file can be whole and consistent yet short (outside damage), and ``put``
        leaves a held page alone. Called only with the origin's bytes for a record they agree
        with (``TieredCache``). The default is ``put``, for tiers whose store overwrites."""
        return self.put(key, data, reason=reason)

    @abc.abstractmethod
    def delete(self, key: PageKey) -> None: ...

    @abc.abstractmethod
    def contains(self, key: PageKey) -> bool: ...

    def known(self, key: PageKey) -> bool:
        """Whether this process knows the tier holds ``key``, with no I/O: a question the
        FUSE loop asks inline (``contains`` may probe the file system)."""
        return self.contains(key)

    @abc.abstractmethod
    def usage(self) -> TierUsage: ...

    def maintain(self) -> None:  # noqa: B027 - optional hook
        """Background work (eviction to the low watermark); called by the cache's evictor."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files and handles."""

    def stats(self) -> dict:
        u = self.usage()
        c = self.counters.snapshot()
        asked = c["hits"] + c["misses"]
        return {
            "tier": self.name,
            "used_bytes": u.used,
            "limit_bytes": u.limit,
            "entries": u.entries,
            **c,
            "hit_ratio": round(c["hits"] / asked, 4) if asked else 0.0,
        }

    def _count(self, reason: str) -> None:
        self.counters.add({"promote": "promotions", "demote": "demotions"}.get(reason, "fills"))


class BudgetedTier(Tier):
    """A tier with a byte budget, an eviction policy, pins and watermarks.

    - ``put`` above the high watermark asks the policy's admission filter first. A policy
      with ``replaces_on_admit`` (tinylfu) evicts its victim right away, so the tier stays
      at the high watermark and never refills below it unfiltered; for the others a put
      that would exceed the budget evicts synchronously (I/O outside the lock).
    - ``maintain`` (background) evicts from the high down to the low watermark.
    - Keys for which ``is_pinned(key)`` is true are never chosen as victims; a tier full of
      pinned pages refuses new ones instead of exceeding its budget.
    - ``on_evict(key, data)`` receives evicted pages whose bytes the hook returned (the RAM
      tier hands them on, so overflow demotes to disk instead of dropping).

    The hooks (``Tier``) may also be given here, for a tier used without a cache.
    """

    def __init__(
        self,
        name: str,
        budget: int,
        policy: EvictionPolicy,
        *,
        high_watermark: float = 0.95,
        low_watermark: float = 0.80,
        is_pinned: Callable[[PageKey], bool] | None = None,
        on_evict: Callable[[PageKey, bytes], None] | None = None,
        wake_evictor: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.budget = budget
        self.policy = policy
        self.high, self.low = high_watermark, low_watermark
        if is_pinned is not None:
            self.is_pinned = is_pinned
        self.on_evict = on_evict
        if wake_evictor is not None:
            self.wake_evictor = wake_evictor
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # a store ended (``stop_storing`` waits)
        self._closing = False  # ``stop_storing``: no page is admitted any more
        self._sizes: dict[PageKey, int] = {}
        self._pending: dict[PageKey, int] = {}
        self._lost_pending: set[PageKey] = set()  # lost (``lost``) while still being stored
        # victims chosen (no longer counted) whose bytes are still being removed: a read of
        # one in that window must not take it for a page another process stored
        self._evicting: set[PageKey] = set()
        self._used = 0  # stored + pending bytes

    # --- storage hooks (called without the lock) -------------------------------------------
    @abc.abstractmethod
    def _load(self, key: PageKey) -> bytes | None:
        """Verified bytes or None; may raise (counted as an error and a miss)."""

    @abc.abstractmethod
    def _store(self, key: PageKey, data: bytes) -> None:
        """Persist a page atomically; raise on failure (nothing half-written may remain)."""

    @abc.abstractmethod
    def _discard(self, key: PageKey) -> bytes | None:
        """Remove a page; return its bytes if they are at hand without I/O (for demotion)."""

    def _exists(self, key: PageKey) -> bool:
        """Whether the page is stored though this process has not seen it (shared dirs)."""
        return False

    def _forget(self, key: PageKey) -> None:
        """A tracked page turned out to be missing; drop any index entry for it."""

    def limit(self) -> int:
        """Bytes this tier may use now (the disk tier also respects free space)."""
        return self.budget

    # --- the tier contract -------------------------------------------------------------------
    def get(self, key: PageKey) -> bytes | None:
        data = None
        with tier_failure(self, "read", key):
            data = self._load(key)
            if data is None and self.known(key):
                # Tracked but not there: lost, or stored by another thread since the look
                # above. Look once more, so a page just stored is not forgotten as lost.
                data = self._load(key)
        lost = False
        with self._lock:
            if data is None:
                self.counters.add("misses")
                self.policy.on_miss(key)
                size = self._sizes.pop(key, None)
                if size is not None:
                    lost = True
                    self._used -= size
                    self.policy.on_remove(key)
            else:
                self.counters.add("hits")
                if key in self._sizes:
                    self.policy.on_hit(key)
                elif key not in self._pending and key not in self._evicting:  # another process stored it
                    self._sizes[key] = len(data)
                    self._used += len(data)
                    self.policy.on_insert(key, len(data))
        if lost:
            self._forget(key)
        return data

    def put(self, key: PageKey, data: bytes, *, reason: str = "fill", hot: bool = False) -> bool:
        size = len(data)
        reserved = self.reserve(key, size, hot=hot)
        if reserved is not True:
            return reserved is None  # None: held already
        try:
            with tier_failure(self, "store", key) as failure:
                self._store(key, data)
        except BaseException:  # a bug: give the reservation back, then raise it
            self.settle(key, size, stored=False)
            raise
        return self.settle(key, size, stored=not failure.failed, reason=reason)

    def replace(self, key: PageKey, data: bytes, *, reason: str = "fill") -> bool:
        """Store ``data`` over a held page of another length, as every fill stores (``_store``:
        written aside, then named, so a reader sees the old file or the new one, never a
        half-written one). The old page's room is given back in the same lock hold that
        reserves the new one, so no reader re-tracks the old file meanwhile. Not admitted
        again: the page was held. False if another thread is storing the page now (its bytes
        are a fill's too) or the store failed."""
        size = len(data)
        with self._lock:
            if key in self._pending or self._closing:
                return False
            old = self._sizes.pop(key, None)
            if old is not None:
                self._used -= old
                self.policy.on_remove(key)
            self._pending[key] = size
            self._used += size
        try:
            with tier_failure(self, "store", key) as failure:
                self._store(key, data)
        except BaseException:  # a bug: give the reservation back, then raise it
            self.settle(key, size, stored=False)
            raise
        return self.settle(key, size, stored=not failure.failed, reason=reason)

    def reserve(self, key: PageKey, size: int, *, hot: bool = False) -> bool | None:
        """Admit a page of ``size`` bytes before it is stored: True (reserved: the caller
        stores it, then calls ``settle`` whatever happens), False (refused: admission
        filter, too big, full of pins) or None (held or being stored already).

        Why separate from ``put``: a fetch worker process writes the page file, and the
        tier must have made room for it (and chosen its victims) before the file exists."""
        limit = self.limit()
        with self._lock:
            if key in self._sizes or key in self._pending:
                return None
            if self._closing:
                self.counters.add("rejected")
                return False
            if size > limit:
                self.counters.add("rejected")
                return False
            full = self._used + size > self.high * limit
            if full and not hot and not self.policy.admit(key, self._first_victim()):
                self.counters.add("rejected")
                return False
            # An admission policy replaces its victim now, keeping the tier at the high
            # watermark; others fill up to the budget and leave the rest to ``maintain``.
            ceiling = self.high * limit if self.policy.replaces_on_admit else limit
            victims = self._take_victims(int(self._used + size - ceiling), partial=False)
            if self._used + size > limit:  # the rest is pinned or being written
                self.counters.add("rejected")
                return False
            self._pending[key] = size
            self._used += size
            over_high = self._used > self.high * limit
        self._drop(victims)
        if over_high:
            self.wake_evictor()
        return True

    def settle(self, key: PageKey, size: int, *, stored: bool, reason: str = "fill") -> bool:
        """End a ``reserve``: the page is stored (counted, tracked) or not (room given back).
        Returns whether the tier holds it."""
        with self._lock:
            del self._pending[key]
            if self._closing:
                self._settled.notify_all()
            if self._lost_pending and key in self._lost_pending:
                self._lost_pending.discard(key)
                if stored:  # a deferred step of storing it failed (counted once, here)
                    self.counters.add("errors")
                stored = False
            if stored:
                self._sizes[key] = size
                self.policy.on_insert(key, size)
                self._count(reason)
            else:
                self._used -= size
        return stored

    def stop_storing(self, timeout: float) -> bool:
        """Admit no page any more and wait until the stores under way have ended (``settle``);
        False if some were still under way after ``timeout`` seconds.

        Why: a tier closing while another thread stores a page (a warm-up's or a reader's
        fetch that was in flight at unmount) closed its index under that store. The page file
        was linked, its index entry added after the close's last flush and lost, and the
        index, closed cleanly, was trusted by the next process: a page file counted by no
        tier and evicted by none. Close waits for them first (a store is a few system calls;
        the fetches themselves are not waited for: their pages are refused)."""
        with self._lock:
            self._closing = True
            return self._settled.wait_for(lambda: not self._pending, timeout)

    def delete(self, key: PageKey) -> None:
        with self._lock:
            size = self._sizes.pop(key, None)
            if size is not None:
                self._used -= size
                self.policy.on_remove(key)
        with tier_failure(self, "delete", key, counted=False):
            self._discard(key)

    def lost(self, key: PageKey) -> None:
        """A page this tier accepted is gone after all (a deferred step of storing it failed,
        e.g. its index batch): forget it, so it is a miss and not a page nobody can read."""
        with self._lock:
            if key in self._pending:
                self._lost_pending.add(key)  # put() is still storing it: it fails there
                return
            size = self._sizes.pop(key, None)
            if size is None:
                return
            self._used -= size
            self.policy.on_remove(key)
            self.counters.add("errors")

    def known(self, key: PageKey) -> bool:
        with self._lock:
            return key in self._sizes

    def contains(self, key: PageKey) -> bool:
        if self.known(key):
            return True
        with tier_failure(self, "check", key, counted=False):
            return self._exists(key)
        return False

    def usage(self) -> TierUsage:
        with self._lock:
            return TierUsage(self._used, self.limit(), len(self._sizes))

    def maintain(self) -> None:
        limit = self.limit()
        with self._lock:
            if self._used <= self.high * limit:
                return
            victims = self._take_victims(self._used - int(self.low * limit), partial=True)
        self._drop(victims)

    def evict_to(self, target_bytes: int) -> int:
        """Evict unpinned pages until at most ``target_bytes`` are used; returns pages evicted."""
        with self._lock:
            victims = self._take_victims(self._used - target_bytes, partial=True)
        self._drop(victims)
        return len(victims)

    # --- internals (lock held) -----------------------------------------------------------------
    def _first_victim(self) -> PageKey | None:
        for key in self.policy.victims():
            if not self.is_pinned(key):
                return key
        return None

    def _take_victims(self, need: int, *, partial: bool) -> list[PageKey]:
        if need <= 0:
            return []
        chosen, freed = [], 0
        for key in self.policy.victims():
            if freed >= need:
                break
            if self.is_pinned(key):
                continue
            chosen.append(key)
            freed += self._sizes[key]
        if freed < need and not partial:
            return []
        for key in chosen:
            self._used -= self._sizes.pop(key)
            self.policy.on_remove(key)
            self._evicting.add(key)
        self.counters.add("evictions", len(chosen))
        return chosen

    def _drop(self, victims: list[PageKey]) -> None:
        for key in victims:
            data = None
            try:
                with tier_failure(self, "evict", key, counted=False) as failure:
                    data = self._discard(key)
            finally:
                with self._lock:
                    self._evicting.discard(key)
            if failure.failed or data is None or self.on_evict is None:
                continue
            with tier_failure(self, "demote", key, counted=False):  # demotion is best effort
                self.on_evict(key, data)
