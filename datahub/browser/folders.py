"""A version's records as folders: the entries directly under a prefix, a page at a time.

Keys are split on ``/``. Without a filter a page is one directory level of the catalog
(``CatalogStore.list_directory``: from the directory table, a read of the level's
subdirectories and one of the files between them, docs/catalog.md "Directories"), then one
``get_records`` for the files shown (their labels): a few queries per page, however many
folders it shows. Why: finding each folder with a query of its own cost ~0.36 ms per
folder, 40.7 ms for the 100 folders of a 10^8-record version's root (docs/benchmarks.md).

With a filter a folder is shown only if a matching record lies below it, which the table
cannot tell: the page walks the key-ordered listing from the cursor (``by_keys``), the
first matching key below a sub-folder shows it and the walk jumps past every key under it
with one new keyset query (``start_after`` = the folder followed by the highest code
point). That costs a query per folder shown, never a scan of a folder's contents.
"""

from __future__ import annotations

from dataclasses import dataclass

from datahub.catalog import Catalog
from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import Record
from datahub.catalog.store import past_subtree

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
    if where is None and (not prefix or prefix.endswith("/")):
        return by_directory(catalog, dataset, seq, prefix=prefix, after=after, limit=limit)
    return by_keys(catalog, dataset, seq, prefix=prefix, where=where, after=after, limit=limit)


def by_directory(
    catalog: Catalog, dataset: str, seq: int, *, prefix: str, after: str, limit: int
) -> tuple[list[Entry], str | None]:
    """``browse`` without a filter, from the store's directory listing (``prefix`` is ``""``
    or ends with ``/``)."""
    if _folder_cursor(after, prefix):
        after = after.rstrip(PAST)  # a folder's cursor: list_directory skips that folder's subtree
    store = catalog.store
    level = list(store.list_directory(dataset, seq, prefix=prefix, start_after=after, limit=limit + 1))
    shown = level[:limit]
    keys = [e[0] for e in shown if not isinstance(e, str)]
    records = store.get_records(dataset, seq, keys) if keys else {}
    entries: list[Entry] = []
    for e in shown:
        if isinstance(e, str):
            entries.append(Entry(e[len(prefix) :], e, None))
        else:
            entries.append(Entry(e[0][len(prefix) :], e[0], records[e[0]]))
    return entries, _after(entries[-1]) if len(level) > limit else None


def by_keys(
    catalog: Catalog,
    dataset: str,
    seq: int,
    *,
    prefix: str,
    after: str,
    limit: int,
    where: RecordFilter | None = None,
) -> tuple[list[Entry], str | None]:
    """``browse`` by walking the key-ordered listing: the way with a filter."""
    entries: list[Entry] = []
    position = after
    # the folder the previous page ended with (its cursor, ``_after``): shown there, and its keys
    # may go on past that cursor (``d/`` + U+10FFFF U+10FFFF), so it is jumped, not shown again
    shown = after.rstrip(PAST) if _folder_cursor(after, prefix) else None
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
                if prefix + folder + "/" != shown:
                    entries.append(Entry(folder + "/", prefix + folder + "/", None))
                # past every key below it. Why not folder + one U+10FFFF: a key below it may
                # start with U+10FFFF U+10FFFF, and the next batch began with the folder again,
                # for ever (review36)
                position = past_subtree(prefix + folder + "/")
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


def _folder_cursor(after: str, prefix: str) -> bool:
    """Whether ``after`` is the cursor of a folder under ``prefix`` (``_after``: the folder's
    path + U+10FFFF). Not a file's named all U+10FFFF (``prefix`` + U+10FFFF): taken for the
    folder ``prefix`` itself, the next page listed ``prefix`` from its start again (review36)."""
    return after.endswith(PAST) and after.rstrip(PAST).endswith("/") and after.rstrip(PAST) != prefix


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


def nearest_holding(
    catalog: Catalog,
    dataset: str,
    seq: int,
    prefix: str,
    *,
    limit: int = 6,
    where: RecordFilter | None = None,
) -> tuple[str, list[Entry], bool] | None:
    """The nearest folder above ``prefix`` that holds anything (matching ``where``), its first
    ``limit`` entries (those holding a match) and whether it holds more; None if ``prefix`` is
    the top level or nothing above matches. Why: a mistyped folder (``?prefix=trian/``) showed
    only "No record here", where the CLI's ``ls`` names what is there (newuser17). Why the
    filter: the page's links and snippets keep it, and a folder whose records it does not match
    (``val/`` for ``labels.class=cat``) led to "No record matches" and a PyTorch script of no
    sample (newuser43). Costs one directory level per folder walked up without a filter, a
    filtered listing's walk with one, only on an empty page."""
    above = [path for _, path in parent_prefixes(prefix) if path != prefix][::-1]
    for folder in [*above, ""] if prefix else []:
        entries, more = browse(catalog, dataset, seq, prefix=folder, where=where, limit=limit)
        if entries:
            return folder, entries, more is not None
    return None
