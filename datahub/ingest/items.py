"""The unit every source yields: one object to become (or stay) a record under ``key``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SourceItem:
    """An object found in a source. ``labels``/``meta`` are None when the source says nothing.

    ``line`` is the manifest line the item came from (None for listings), so errors found
    late (a duplicate key during the merge) can still name it.
    """

    key: str
    url: str
    etag: str
    size: int
    labels: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None
    line: int | None = None

    def to_json(self) -> str:
        return json.dumps(
            [self.key, self.url, self.etag, self.size, self.labels, self.meta, self.line],
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> SourceItem:
        key, url, etag, size, labels, meta, line = json.loads(text)
        return cls(key, url, etag, size, labels, meta, line)
