"""Where a VersionDataset's bytes come from: the tiered cache, or a mounted version.

Both are picklable and open what they need lazily in each process: a DataLoader worker
(forked or spawned) gets a copy that opens its own cache or file handles, never one
inherited from the parent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datahub.catalog import Record
from datahub.config import Config
from datahub.torch.files import open_file


class CacheSource:
    """Read records through ``datahub.cache`` (RAM -> disk -> shared -> object store)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._pid = 0
        self._cache: Any = None
        self._stores: Any = None

    def _open(self) -> Any:
        if self._cache is None or self._pid != os.getpid():
            from datahub.cache import open_cache
            from datahub.storage import StoreRegistry

            self._stores = StoreRegistry(self.config)
            self._cache = open_cache(self.config, self._stores)
            self._pid = os.getpid()
        return self._cache

    def read(self, record: Record, offset: int = 0, size: int | None = None) -> bytes:
        return self._open().read(record.ref, offset, size)

    def hint(self, records: Sequence[Record]) -> None:
        """Tell the cache the upcoming read order, so it fetches ahead (within its budget)."""
        self._open().hint([r.ref for r in records])

    def close(self) -> None:
        if self._cache is not None and self._pid == os.getpid():
            self._cache.close()
            self._stores.close()
        self._cache = self._stores = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])


class MountSource:
    """Read records as files under a mounted version (``datahub mount``) or any directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def read(self, record: Record, offset: int = 0, size: int | None = None) -> bytes:
        with open_file(self.root / record.key) as fh:  # no isatty() ioctl (datahub.torch.files)
            fh.seek(offset)
            return fh.read() if size is None else fh.read(size)

    def hint(self, records: Sequence[Record]) -> None:
        """Tell a datahub mount the upcoming files (datahub.hint_names: a few lookups).

        Best effort: a file that is missing, or a directory that is not a datahub mount,
        costs a failed ``stat`` and nothing else.
        """
        from datahub.hint_names import encode

        inodes = []
        for record in records:
            try:
                inodes.append(os.stat(self.root / record.key).st_ino)
            except OSError:
                continue
        for name in encode(inodes):
            try:
                os.stat(self.root / name)
            except OSError:
                pass  # ENOENT is the answer: the daemon took the hint

    def close(self) -> None:
        pass
