"""Read-order hints, the daemon's side: reassemble the lookups of ``datahub.hint_names``.

A window of upcoming files arrives as several lookups of reserved names (the format and its
why: ``datahub/hint_names.py``). The daemon answers each with ENOENT, which the kernel does
not cache, and once every part of a token has arrived it hands the files, in order, to the
cache's ``hint``. A new token replaces an unfinished older one: only the latest window matters.
"""

from __future__ import annotations

import threading

from datahub.hint_names import PREFIX, decode

__all__ = ["PREFIX", "HintAssembler"]


class HintAssembler:
    """Collects the parts of the latest token; returns the whole window when complete."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._token: int | None = None
        self._parts: dict[int, list[int]] = {}
        self._expected = 0

    def add(self, name: str) -> list[int] | None:
        decoded = decode(name)
        if decoded is None:
            return None
        token, part, parts, inodes = decoded
        with self._lock:
            if token != self._token:
                self._token, self._parts, self._expected = token, {}, parts
            self._parts[part] = inodes
            if len(self._parts) < self._expected:
                return None
            window = [ino for i in range(self._expected) for ino in self._parts.get(i, ())]
            self._token, self._parts = None, {}
            return window
