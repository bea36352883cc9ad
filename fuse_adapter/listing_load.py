"""Streaming a mount's listing into its tree (in a loader thread), retried from its cursor
after a failure: the one loader of both a version's listing (``layout``) and a bucket's
(``bucket_listing``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

from datahub.catalog.model import Record
from fuse_adapter.mount_info import MountInfo
from fuse_adapter.tree import Feed, ListingTree

log = logging.getLogger(__name__)

BATCH = 2000  # entries handed to the tree per lock acquisition


def _record_mtime(record: Record, default: float) -> float:
    value = record.meta.get("mtime") if record.meta else None
    return float(value) if isinstance(value, (int, float)) else default


#: a failed listing load is retried from its cursor after these pauses (doubling, capped)
RETRY_FIRST, RETRY_MAX = 1.0, 30.0


def load_records(
    tree: ListingTree,
    feed: Feed,
    records_after: Callable[[str], Iterator[Record]],
    default_mtime: float,
    info: MountInfo | None,
    *,
    limit: int = 0,
    stopping: threading.Event | None = None,
) -> bool:
    """Stream a listing into the tree (runs in a loader thread). With ``limit``, stop before
    record ``limit + 1`` and return False, leaving the feed open at its cursor.

    ``records_after(cursor)``: the listing after key ``cursor``. A failure (the catalog or
    the bucket did not answer) is not the end of the listing: the feed is marked failed
    (lookups past the cursor answer EIO, never ENOENT) and the load resumes from the cursor
    after a pause, until it completes or ``stopping`` is set."""
    added, pause = 0, RETRY_FIRST
    stopping = stopping or threading.Event()
    while True:
        batch: list[tuple[str, int, float, str, str]] = []
        try:
            for r in records_after(feed.cursor):
                if limit and added >= limit:
                    tree.add_files(feed, batch)
                    return False
                batch.append((r.key, r.size, _record_mtime(r, default_mtime), r.url, r.etag))
                added += 1
                if len(batch) >= BATCH:
                    tree.add_files(feed, batch)
                    batch = []
            tree.add_files(feed, batch)
            break
        except Exception as exc:  # the mount stays up and retries
            if batch and not isinstance(exc, ValueError):
                tree.add_files(feed, batch)  # what did arrive is in key order: keep it
            tree.fail_feed(feed, exc)
            if info is not None:
                info.error = f"listing {feed.name or 'the mount'} failed, retrying in {pause:.0f} s: {exc}"
            log.error("loading the listing of %s failed (retrying from %r in %.0f s): %s",
                      feed.name or "the mount", feed.cursor, pause, exc)  # fmt: skip
            if isinstance(exc, ValueError) or stopping.wait(pause):  # out of order: a retry cannot help
                if info is not None:
                    info.state = "failed"
                return True
            pause = min(pause * 2, RETRY_MAX)
    tree.finish_feed(feed)
    if info is not None:
        info.files += feed.files  # a mount of several versions adds up its listings
        info.bytes += feed.bytes
        info.shadowed += feed.shadowed
        info.error = ""
    return True
