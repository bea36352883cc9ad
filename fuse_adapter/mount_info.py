"""What a read-only mount's ``.datahub`` file says and its log reports: which versions it
shows, its listing's state and totals. Filled by the layout and the listing loaders."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

INFO_FILE = ".datahub"


@dataclass
class MountInfo:
    """What ``.datahub`` says and the mount logs: which versions this mount shows."""

    source: str
    versions: list[str] = field(default_factory=list)  # "dataset@vN"
    state: str = "ready"  # "listing" while a bucket snapshot is being taken, "failed" after an error
    listing: str = "whole"  # "by-directory": a large bucket, each directory listed when first needed
    files: int = 0
    bytes: int = 0
    skipped: int = 0
    shadowed: int = 0
    error: str = ""
    #: a bucket mount's snapshot: "committed", or "not committed: <why>" (the dataset of its name
    #: is not one mounts make: bucket_listing.foreign_snapshot); "" until then and for versions
    snapshot: str = ""
    hinted: dict = field(default_factory=lambda: {"windows": 0, "files": 0})  # read-order hints taken

    def count_hint(self, files: int) -> None:
        self.hinted = {"windows": self.hinted["windows"] + 1, "files": self.hinted["files"] + files}

    def to_json(self) -> bytes:
        """Pretty JSON padded with spaces to a multiple of 1 KiB.

        The kernel may cache this file's pages (zero-message opens keep the cache) and
        learns its size from a stat; while the state changes, a reader could otherwise see
        a new size with old pages or the reverse (truncated JSON, or NULs after it). With a
        size that stays put, every read is whole JSON: this state or the previous one.
        """
        text = json.dumps(self.__dict__, indent=2, sort_keys=True)
        return (text.ljust(-(-(len(text) + 1) // INFO_PAD) * INFO_PAD - 1) + "\n").encode()


INFO_PAD = 1024
