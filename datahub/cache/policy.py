"""Eviction policies, chosen by name (``config.cache.policy``).

A policy only orders keys; the tier it serves owns bytes, budgets, pins and I/O. The
tier reports what happens (insert, hit, miss, remove); the policy answers two questions:
which keys to evict first (``victims``), and whether a new key is worth evicting one of
those for (``admit``).

- ``lru``: least recently used first. An epoch loop over a dataset larger than the cache
  evicts every page just before it is needed again: a hit ratio near zero.
- ``slru``: segmented LRU. A page enters a probation segment and moves to a protected
  one (80 % of the budget) on its second hit, so one scan cannot flush the hot set; a
  pure epoch loop still defeats it (no page is hit twice before it falls out).
- ``tinylfu``: SLRU behind a TinyLFU admission filter. A count-min sketch (4-bit
  counters, periodically halved so old popularity fades) estimates how often each key
  was asked for, hits and misses alike; when the tier is full, a newcomer is admitted
  only if it was asked for clearly more often (by more than ``margin``) than the victim
  it would replace. In an epoch loop every key is equally frequent, so newcomers lose
  and the cache keeps a stable subset: a hit ratio close to cache size / dataset size.
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator

from datahub.errors import InvalidInput


class EvictionPolicy(abc.ABC):
    name: str = ""
    #: True for admission policies: an admitted newcomer evicts its victim at once instead
    #: of letting the tier overshoot and the background evictor drop to the low watermark
    #: (which would re-open the tier to unfiltered newcomers and churn the stable subset).
    replaces_on_admit: bool = False

    @abc.abstractmethod
    def on_insert(self, key: Hashable, size: int) -> None:
        """``key`` (``size`` bytes) is now stored."""

    @abc.abstractmethod
    def on_hit(self, key: Hashable) -> None:
        """A stored key was read."""

    def on_hits(self, keys: Iterable[Hashable]) -> None:
        """Stored keys read, in this order: the same as :meth:`on_hit` of each. The fold of
        hits answered in pyfuse3's C code reports thousands a second in one call; policies
        override this to run the loop without a method call (and ``super()``) per key."""
        for key in keys:
            self.on_hit(key)

    def on_miss(self, key: Hashable) -> None:  # noqa: B027 - optional hook
        """A key was asked for and not found (frequency-aware policies count it)."""

    @abc.abstractmethod
    def on_remove(self, key: Hashable) -> None:
        """``key`` is gone (evicted, deleted or found corrupt)."""

    @abc.abstractmethod
    def victims(self) -> Iterator[Hashable]:
        """Stored keys, the one to evict first first. Do not mutate while iterating."""

    def admit(self, candidate: Hashable, victim: Hashable | None) -> bool:
        """Whether ``candidate`` may displace ``victim`` in a full tier (default: always)."""
        return True


class LRU(EvictionPolicy):
    name = "lru"

    def __init__(self, budget: int = 0) -> None:
        self._order: OrderedDict[Hashable, int] = OrderedDict()

    def on_insert(self, key: Hashable, size: int) -> None:
        self._order[key] = size
        self._order.move_to_end(key)

    def on_hit(self, key: Hashable) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def on_hits(self, keys: Iterable[Hashable]) -> None:
        order = self._order
        move = order.move_to_end
        for key in keys:
            if key in order:
                move(key)

    def on_remove(self, key: Hashable) -> None:
        self._order.pop(key, None)

    def victims(self) -> Iterator[Hashable]:
        return iter(self._order)


class SLRU(EvictionPolicy):
    name = "slru"
    protected_share = 0.8

    def __init__(self, budget: int) -> None:
        self._probation: OrderedDict[Hashable, int] = OrderedDict()
        self._protected: OrderedDict[Hashable, int] = OrderedDict()
        self._protected_bytes = 0
        self._protected_limit = int(budget * self.protected_share)

    def on_insert(self, key: Hashable, size: int) -> None:
        self.on_remove(key)
        self._probation[key] = size

    def on_hit(self, key: Hashable) -> None:
        if key in self._protected:
            self._protected.move_to_end(key)
        else:
            self._promote(key)

    def on_hits(self, keys: Iterable[Hashable]) -> None:
        protected = self._protected
        move = protected.move_to_end
        for key in keys:
            if key in protected:
                move(key)
            else:
                self._promote(key)

    def _promote(self, key: Hashable) -> None:
        """A second hit of a key in probation moves it to the protected segment (a key not
        stored is ignored)."""
        size = self._probation.pop(key, None)
        if size is None:
            return
        self._protected[key] = size
        self._protected_bytes += size
        while self._protected_bytes > self._protected_limit and len(self._protected) > 1:
            old, old_size = self._protected.popitem(last=False)
            self._protected_bytes -= old_size
            self._probation[old] = old_size  # back to probation, as its most recent entry

    def on_remove(self, key: Hashable) -> None:
        self._probation.pop(key, None)
        size = self._protected.pop(key, None)
        if size is not None:
            self._protected_bytes -= size

    def victims(self) -> Iterator[Hashable]:
        yield from self._probation
        yield from self._protected


class CountMinSketch:
    """Approximate access counts in 4 rows of 4-bit counters, halved every ``sample`` adds."""

    _HALVE = bytes(i >> 1 for i in range(256))
    _DEPTH = 4
    _SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)

    def __init__(self, entries: int) -> None:
        width = 1024
        while width < 4 * entries and width < 1 << 22:
            width <<= 1
        self._mask = width - 1
        self._rows = [bytearray(width) for _ in range(self._DEPTH)]
        self._sample = 10 * max(entries, 64)
        self._added = 0

    def _slots(self, key: Hashable) -> list[int]:
        h = hash(key) & 0xFFFFFFFFFFFFFFFF
        return [((h * seed) >> 32) & self._mask for seed in self._SEEDS]

    def add(self, key: Hashable) -> None:
        self.add_all((key,))

    def add_all(self, keys: Iterable[Hashable]) -> None:
        """``add`` of each key in order (halving where the count of adds reaches ``sample``,
        as one at a time would). _slots unrolled, and the rows held in locals across the
        batch: every cache hit runs this (half the time of the loop over zip)."""
        m, sample = self._mask, self._sample
        r0, r1, r2, r3 = self._rows
        s0, s1, s2, s3 = self._SEEDS
        added = self._added
        for key in keys:
            h = hash(key) & 0xFFFFFFFFFFFFFFFF
            i = ((h * s0) >> 32) & m
            if r0[i] < 15:
                r0[i] += 1
            i = ((h * s1) >> 32) & m
            if r1[i] < 15:
                r1[i] += 1
            i = ((h * s2) >> 32) & m
            if r2[i] < 15:
                r2[i] += 1
            i = ((h * s3) >> 32) & m
            if r3[i] < 15:
                r3[i] += 1
            added += 1
            if added >= sample:
                added //= 2
                self._rows = [bytearray(row.translate(self._HALVE)) for row in self._rows]
                r0, r1, r2, r3 = self._rows
        self._added = added

    def estimate(self, key: Hashable) -> int:
        return min(row[i] for row, i in zip(self._rows, self._slots(key), strict=True))


class TinyLFU(SLRU):
    name = "tinylfu"
    replaces_on_admit = True

    def __init__(self, budget: int, typical_size: int = 64 * 1024) -> None:
        super().__init__(budget)
        self.sketch = CountMinSketch(max(budget // max(typical_size, 1), 1))

    def on_hit(self, key: Hashable) -> None:
        self.sketch.add(key)
        super().on_hit(key)

    def on_hits(self, keys: Iterable[Hashable]) -> None:
        keys = keys if isinstance(keys, list | tuple) else list(keys)
        self.sketch.add_all(keys)  # the sketch and the segments are independent: same state
        super().on_hits(keys)

    def on_miss(self, key: Hashable) -> None:
        self.sketch.add(key)

    #: a newcomer must have been asked for this many times more than its victim. With 0, an
    #: epoch loop cascades: the page just missed (n reads) beats the victim not yet read
    #: this epoch (n - 1), evicting the next page to be read, which then beats the next …
    #: (and sketch collisions start such a cascade at random). One access of margin stops it.
    margin = 1

    def admit(self, candidate: Hashable, victim: Hashable | None) -> bool:
        if victim is None:
            return True
        return self.sketch.estimate(candidate) > self.sketch.estimate(victim) + self.margin


POLICIES: dict[str, Callable[[int], EvictionPolicy]] = {"lru": LRU, "slru": SLRU, "tinylfu": TinyLFU}


def make_policy(name: str, budget: int) -> EvictionPolicy:
    """The policy registered as ``name`` for a tier of ``budget`` bytes."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise InvalidInput(
            f"unknown cache eviction policy {name!r}: set cache.policy to one of {', '.join(POLICIES)}"
        ) from None
    return factory(budget)
