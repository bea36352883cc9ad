"""The RAM tier: pages in a dict under a byte budget.

Dict reads and writes are atomic under the GIL, so the hooks need no lock of their own.
Evicted pages are returned by ``_discard`` so the cache can demote them to disk.
"""

from __future__ import annotations

from datahub.cache.pages import PageKey
from datahub.cache.tier import BudgetedTier


class RamTier(BudgetedTier):
    def __init__(self, budget: int, policy, **options) -> None:  # options: see BudgetedTier
        super().__init__("ram", budget, policy, **options)
        self._data: dict[PageKey, bytes] = {}

    def holds(self, key: PageKey) -> bool:
        """Whether the page is in RAM now (no counting, no policy update)."""
        return key in self._data

    def _load(self, key: PageKey) -> bytes | None:
        return self._data.get(key)

    def _store(self, key: PageKey, data: bytes) -> None:
        self._data[key] = bytes(data) if not isinstance(data, bytes) else data

    def _discard(self, key: PageKey) -> bytes | None:
        return self._data.pop(key, None)

    def close(self) -> None:
        self._data.clear()
