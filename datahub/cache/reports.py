"""What the users of a cache add to its stats: each mount's warm-up and open mode.

Why an object of its own: the cache knows nothing of mounts (they sit above it), yet
``datahub cache stats`` and /metrics show one snapshot per process, so a mount hands the
cache a function that describes its state and the snapshot calls it. This registry keeps
those functions and nothing else; the cache only puts what it returns into ``stats()``.

Adding a function calls ``on_add`` (the cache publishes its snapshot then): a mount is in
``datahub cache stats`` from the moment it reports, not from the cache's next maintenance
round, seconds later, during which a live mount would look absent.
"""

from __future__ import annotations

from collections.abc import Callable

Status = Callable[[], dict]


class StatusReports:
    """The status functions of the mounts reading through one cache, by kind."""

    def __init__(self, on_add: Callable[[], None] = lambda: None) -> None:
        self._warmups: list[Status] = []
        self._mounts: list[Status] = []
        self._on_add = on_add

    def add_warmup(self, status: Status) -> None:
        """Show ``status()`` (a mount's warm-up pass) under ``warmups``."""
        self._warmups.append(status)
        self._on_add()

    def add_mount(self, status: Status) -> None:
        """Show ``status()`` (a mount's open mode and passthrough counts) under ``mounts``."""
        self._mounts.append(status)
        self._on_add()

    def snapshot(self) -> dict[str, list[dict]]:
        """``{"warmups": [...], "mounts": [...]}``: each status called now, in the order added."""
        return {
            "warmups": [status() for status in self._warmups],
            "mounts": [status() for status in self._mounts],
        }
