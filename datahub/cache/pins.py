"""Pins: named sets of objects whose pages the persistent tiers never evict.

Why an object of its own: pins are state the read path only asks one question of
(``holds(key)``, inline in every eviction decision, so it is a frozenset look-up), while
the rest (naming, persisting, reloading what other processes pinned) is bookkeeping that
has nothing to do with reading pages. A pin records the intent only; warming the pages
is a separate ``TieredCache.prefetch``.

With a disk tier the pins live in its LMDB index (``datahub.cache.index.PageIndex``), so
they survive restarts and every process sharing the directory sees them: ``reload`` (run
by the cache's maintainer) picks up another process's changes when the index's pin
generation moved. Without one they are this process's only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from datahub.cache.pages import PageKey, object_id_of
from datahub.errors import InvalidInput
from datahub.storage.base import ObjectRef


class PinStore(Protocol):
    """Where pins persist: the disk tier's index (``datahub.cache.index.PageIndex``)."""

    def set_pin(self, name: str, object_ids: Iterable[str]) -> int: ...

    def remove_pin(self, name: str) -> bool: ...

    def pins(self) -> dict[str, int]: ...

    def pinned_objects(self) -> set[str]: ...

    def pin_generation(self) -> int: ...


class Pins:
    """The pins of one cache: persisted in ``store`` if given, else kept in memory."""

    def __init__(self, store: PinStore | None = None) -> None:
        self._store = store
        self._memory: dict[str, set[str]] = {}
        self._pinned: frozenset[str] = frozenset()
        self._generation = -1

    def pin(self, name: str, refs: Iterable[ObjectRef]) -> int:
        """Never evict the pages of ``refs`` from a persistent tier until ``unpin(name)``;
        returns the object count. Re-pinning a name replaces its set."""
        if not name or "\0" in name:
            raise InvalidInput(f"invalid pin name {name!r}: use a non-empty name such as DATASET@VERSION")
        ids = {object_id_of(r.url, r.etag) for r in refs}
        if self._store is not None:
            n = self._store.set_pin(name, ids)
        else:
            self._memory[name] = ids
            n = len(ids)
        self.reload()
        return n

    def unpin(self, name: str) -> bool:
        """Drop the pin ``name``; False if there was none."""
        if self._store is not None:
            found = self._store.remove_pin(name)
        else:
            found = self._memory.pop(name, None) is not None
        self.reload()
        return found

    def names(self) -> dict[str, int]:
        """Each pin's name and object count."""
        if self._store is not None:
            return self._store.pins()
        return {name: len(ids) for name, ids in self._memory.items()}

    def holds(self, key: PageKey) -> bool:
        """Whether a pin holds the object of ``key`` (no I/O: eviction asks it under its lock)."""
        return key.object_id in self._pinned

    def __len__(self) -> int:
        """Objects held by pins (as last loaded)."""
        return len(self._pinned)

    def reload(self) -> None:
        """Load the pinned objects again if the store's generation moved (another process
        pinned or unpinned); may raise the store's errors (the caller keeps the old set)."""
        if self._store is None:
            self._pinned = frozenset().union(*self._memory.values())
            return
        generation = self._store.pin_generation()
        if generation != self._generation:
            self._pinned = frozenset(self._store.pinned_objects())
            self._generation = generation
