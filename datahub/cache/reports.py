"""What the users of a cache add to its stats: each mount's warm-up and open mode.

Why an object of its own: the cache knows nothing of mounts (they sit above it), yet
``datahub cache stats`` and /metrics show one snapshot per process, so a mount hands the
cache a function that describes its state and the snapshot calls it. This registry keeps
those functions and nothing else; the cache only puts what it returns into ``stats()``.
"""

from __future__ import annotations

from collections.abc import Callable

Status = Callable[[], dict]


class StatusReports:
    """The status functions of the mounts reading through one cache, by kind."""

    def __init__(self) -> None:
        self._warmups: list[Status] = []
        self._mounts: list[Status] = []

    def add_warmup(self, status: Status) -> None:
        """Show ``status()`` (a mount's warm-up pass) under ``warmups``."""
        self._warmups.append(status)

    def add_mount(self, status: Status) -> None:
        """Show ``status()`` (a mount's open mode and passthrough counts) under ``mounts``."""
        self._mounts.append(status)

    def snapshot(self) -> dict[str, list[dict]]:
        """``{"warmups": [...], "mounts": [...]}``: each status called now, in the order added."""
        return {
            "warmups": [status() for status in self._warmups],
            "mounts": [status() for status in self._mounts],
        }
