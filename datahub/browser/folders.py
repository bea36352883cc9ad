"""A version's records as folders: the entries directly under a prefix, a page at a time.

Keys are split on ``/``. A page walks the catalog's key-ordered listing from the cursor: a
file is one record; the first key below a sub-folder shows that folder, and the walk then
jumps past every key under it with one new keyset query (``start_after`` = the folder
followed by the highest code point). So a page costs at most one query per entry shown,
never a scan of the folder's contents, and a folder of 10^6 records browses like one of 10.
"""

from __future__ import annotations

from dataclasses import dataclass

from datahub.catalog import Catalog
from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import Record

PAST = "\U0010ffff"  # above every character a key can hold: folder + PAST is after all its keys


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # the part below the prefix: "cat/" for a folder, "0001.jpg" for a file
    path: str  # the folder's full prefix, or the record's key
    record: Record | None  # None for a folder

    @property
    def is_folder(self) -> bool:
        return self.record is None


def browse(
    catalog: Catalog,
    dataset: str,
    seq: int,
    *,
    prefix: str = "",
    where: RecordFilter | None = None,
    after: str = "",
    limit: int = 100,
) -> tuple[list[Entry], str | None]:
    """Up to ``limit`` entries under ``prefix`` after the cursor ``after`` (a position in key
    order), and the cursor of the next page (None at the end)."""
    entries: list[Entry] = []
    position = after
    while True:
        wanted = limit + 1 - len(entries)
        batch = catalog.store.list_records(
            dataset, seq, prefix=prefix, start_after=position, limit=wanted, where=where
        )
        seen, jumped = 0, False
        for record in batch:
            seen += 1
            rest = record.key[len(prefix) :]
            folder, slash, _ = rest.partition("/")
            if slash:
                entries.append(Entry(folder + "/", prefix + folder + "/", None))
                position = prefix + folder + "/" + PAST
                jumped = True
            else:
                entries.append(Entry(rest, record.key, record))
                position = record.key
            if len(entries) > limit or jumped:
                break
        if len(entries) > limit:
            return entries[:limit], _after(entries[limit - 1])
        if not jumped and seen < wanted:
            return entries, None


def _after(last_shown: Entry) -> str:
    """The position the next page starts after: just past the last entry shown."""
    return last_shown.path + PAST if last_shown.is_folder else last_shown.path


def parent_prefixes(prefix: str) -> list[tuple[str, str]]:
    """Breadcrumbs: (segment name, prefix) for every folder level of ``prefix``."""
    crumbs, path = [], ""
    for part in prefix.split("/")[:-1]:
        path += part + "/"
        crumbs.append((part, path))
    return crumbs
