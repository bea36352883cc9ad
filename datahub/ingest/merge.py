"""The streaming merge that makes a re-import commit only what changed.

Both inputs are in key order: the source listing and the head version's listing. One
pass walks them side by side (like a sorted-merge join), so memory does not grow with the
number of objects:

- a key only in the source is *added*; a key only in the head is *removed*;
- a key in both is *modified* when the source object differs (URL, etag or size), when
  the source gives labels/meta that differ, or when ``--copy`` was switched on or off.
  Labels/meta the source does not mention are carried over from the head record, so a
  re-import never drops labels added since (e.g. by LabelX).

With ``--copy`` a record's URL is its content-addressed blob, so the source location
and etag it came from are kept in ``meta["_source"]`` to compare against next time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from datahub.catalog.model import Record
from datahub.errors import InvalidInput, ManifestError, StorageError
from datahub.ingest.items import SourceItem
from datahub.validation import MAX_JSON_DEPTH, Unreadable

SOURCE_META = "_source"
Kind = Literal["added", "removed", "modified"]


@dataclass(frozen=True, slots=True)
class PlannedChange:
    kind: Kind
    key: str
    item: SourceItem | None  # None for "removed"
    old: Record | None  # None for "added"


def user_meta(record: Record | None) -> dict[str, Any]:
    if record is None:
        return {}
    if isinstance(record.meta, Unreadable):
        return record.meta  # carried over as stored (issue 24 item 5)
    return {k: v for k, v in record.meta.items() if k != SOURCE_META}


def _kept(value: Mapping[str, Any]) -> Any:
    """A head record's field to carry over: a copy, or an over-deep legacy value as stored."""
    return value if isinstance(value, Unreadable) else dict(value)


def source_identity(record: Record) -> tuple[str, str, bool]:
    """(url, etag, copied) of the source object a record was imported from."""
    origin = record.meta.get(SOURCE_META)
    if isinstance(origin, Mapping):
        return str(origin.get("url", "")), str(origin.get("etag", "")), True
    return record.url, record.etag, False


def is_unchanged(item: SourceItem, old: Record, copy: bool) -> bool:
    url, etag, copied = source_identity(old)
    return (
        (url, etag, copied) == (item.url, item.etag, copy)
        and old.size == item.size
        and (item.labels is None or dict(item.labels) == dict(old.labels))
        and (item.meta is None or dict(item.meta) == user_meta(old))
    )


def plan_changes(
    source: Iterator[SourceItem], head: Iterator[Record], *, copy: bool
) -> Iterator[PlannedChange]:
    """Yield the changes that turn ``head`` into ``source``, in key order."""
    checked = _strictly_increasing(source)
    item = next(checked, None)
    old = next(head, None)
    while item is not None or old is not None:
        if old is None or (item is not None and item.key < old.key):
            yield PlannedChange("added", item.key, item, None)
            item = next(checked, None)
        elif item is None or old.key < item.key:
            yield PlannedChange("removed", old.key, None, old)
            old = next(head, None)
        else:
            if not is_unchanged(item, old, copy):
                yield PlannedChange("modified", item.key, item, old)
            item, old = next(checked, None), next(head, None)


def _strictly_increasing(items: Iterator[SourceItem]) -> Iterator[SourceItem]:
    prev: SourceItem | None = None
    for item in items:
        if prev is not None and item.key <= prev.key:
            if item.key == prev.key:
                where = f"lines {prev.line} and {item.line}" if item.line else "the source"
                raise ManifestError(
                    f"duplicate key {item.key!r} in {where}: each key may appear once",
                    key=item.key,
                    line=item.line,
                )
            raise StorageError(f"source listing is not in key order at {prev.key!r} -> {item.key!r}")
        prev = item
        yield item


def new_record(
    item: SourceItem, old: Record | None, located: Callable[[SourceItem], Record] | None
) -> Record:
    """The record to put for ``item``: its object (or its copy) plus labels/meta."""
    labels = dict(item.labels) if item.labels is not None else _kept(old.labels if old else {})
    meta = dict(item.meta) if item.meta is not None else user_meta(old)
    if located is None:
        return Record(item.key, item.url, item.etag, item.size, "", meta, labels)
    if isinstance(meta, Unreadable):
        raise InvalidInput(
            f"cannot re-import {item.key!r} with --copy: its stored meta is nested deeper than "
            f"{MAX_JSON_DEPTH} levels (written before datahub refused such values) and the copy's "
            f"source must be recorded in it; give the line its meta in a manifest, or import without --copy",
            key=item.key,
        )
    blob = located(item)
    meta[SOURCE_META] = {"url": item.url, "etag": item.etag}
    return Record(item.key, blob.url, blob.etag, blob.size, blob.checksum, meta, labels)
