"""The datasets list and a dataset's versions and tags, as the caller may see them.

Unreadable datasets are dropped before anything else (as ``GET /v1/datasets`` does), so
neither a name, a count nor a page boundary reveals them. The list is paged by name so its
cost is one name scan plus a head lookup per row shown, however many datasets exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from datahub.api.access import Principal, can
from datahub.catalog import Catalog
from datahub.catalog.model import Dataset, Version


@dataclass(frozen=True, slots=True)
class DatasetRow:
    dataset: Dataset
    head: Version | None  # None: no version yet


def readable(catalog: Catalog, principal: Principal) -> Iterator[Dataset]:
    return (d for d in catalog.store.list_datasets() if can(principal, d, "reader"))


def dataset_rows(
    catalog: Catalog, principal: Principal, *, search: str = "", after: str = "", limit: int = 100
) -> tuple[list[DatasetRow], str | None]:
    """One page of readable datasets whose name contains ``search``, after the name ``after``."""
    wanted = search.strip().lower()
    page: list[Dataset] = []
    more = False
    for d in readable(catalog, principal):
        if d.name <= after or (wanted and wanted not in d.name.lower()):
            continue
        if len(page) == limit:
            more = True
            break
        page.append(d)
    rows = [DatasetRow(d, head_version(catalog, d.name)) for d in page]
    return rows, (page[-1].name if more else None)


def head_version(catalog: Catalog, name: str) -> Version | None:
    seq = catalog.store.head(name)
    return catalog.store.get_version(name, seq) if seq else None


def tags_of(versions: list[Version]) -> list[tuple[str, int]]:
    """(tag, version) pairs, by tag name."""
    return sorted((tag, v.seq) for v in versions for tag in v.tags)
