"""Counters that count: named integers that many threads may add to at once.

The cache's counters are bumped from readers, the origin's worker threads (up to
``origin_concurrency``), readahead and stream threads, and read by ``cache stats`` and
/metrics. ``x += 1`` on a shared attribute is a read, an add and a write: two threads can
read the same value and one increment is lost. Every counter of the cache is therefore a
``Counters`` subclass: ``add`` takes a small lock, ``snapshot`` copies all values under it
(one consistent view), and reading one attribute (``counters.hits``) is a plain dict read.
Assigning an attribute raises, so an unlocked ``counters.hits += 1`` fails at once instead of
losing counts silently.

Not prometheus_client: it is not a dependency, and /metrics is built from ``stats()``
(datahub.cache.metrics) so the CLI and the metrics agree.
"""

from __future__ import annotations

import threading
from typing import ClassVar


class Counters:
    """A fixed set of named counters (``FIELDS``), safe to ``add`` to from any thread."""

    FIELDS: ClassVar[tuple[str, ...]] = ()
    __slots__ = ("_lock", "_values")

    def __init__(self) -> None:
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_values", dict.fromkeys(self.FIELDS, 0))

    def __getattr__(self, name: str) -> int:  # only called for names that are not slots
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no counter {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__}.{name} is a counter: use add({name!r}, n)")

    def add(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (KeyError for a name not in ``FIELDS``)."""
        with self._lock:
            self._values[name] += n

    def add_many(self, **fields: int) -> None:
        """Add to several counters under one lock (one consistent step)."""
        with self._lock:
            for name, n in fields.items():
                self._values[name] += n

    def snapshot(self) -> dict[str, int]:
        """All counters at one instant, in ``FIELDS`` order."""
        with self._lock:
            return dict(self._values)

    def __repr__(self) -> str:
        values = ", ".join(f"{k}={v}" for k, v in self.snapshot().items())
        return f"{type(self).__name__}({values})"
