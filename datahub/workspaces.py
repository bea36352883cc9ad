"""Commit a flushed workspace as a dataset version (training outputs are data too).

Lives outside ``datahub.cache`` because the cache knows nothing of the catalog: this module
is the one place the two meet. Records point at the flushed origin objects with the etag
(and sha256) the flush recorded, so the version is immutable like any other (promise 1).
Only the differences from the dataset's head are committed, and the commit id is derived
from the base and the content, so retrying after a lost reply does not commit twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from datahub.cache.writeback import FlushedObject, Workspace
from datahub.catalog.model import Change, Delete, Put, Record, Version
from datahub.errors import Conflict, DatasetNotFound, VersionNotFound


def commit_workspace(
    workspace: Workspace, catalog, dataset: str, *, message: str = "", author: str = ""
) -> Version:
    """Flush ``workspace`` and commit its files as the next version of ``dataset``.

    The dataset is created if it does not exist. Raises Conflict if files keep changing
    while we flush (commit once writers pause); returns the head unchanged if the
    workspace already equals it.
    """
    objects = _flushed(workspace)
    try:
        catalog.get_dataset(dataset)
    except DatasetNotFound:
        catalog.create_dataset(dataset, description=f"outputs of workspace {workspace.name!r}")
    try:
        head: Version | None = catalog.resolve(dataset, None)
    except VersionNotFound:
        head = None
    base = head.seq if head else 0
    wanted = {o.path: Record(o.path, o.url, o.etag, o.size, checksum=f"sha256:{o.sha256}") for o in objects}
    current = catalog.list_records(dataset, base) if head else iter(())
    changes = list(_changes(current, wanted))
    if not changes and head is not None:
        return head
    digest = hashlib.sha256(f"{workspace.name}\0{dataset}\0{base}".encode())
    for o in sorted(objects, key=lambda o: o.path):
        digest.update(f"\0{o.path}\0{o.etag}".encode())
    return catalog.commit(
        dataset,
        changes,
        base=base,
        message=message or f"commit of workspace {workspace.name!r}",
        author=author,
        lineage={"workspace": workspace.name, "files": len(objects)},
        commit_id=f"workspace-{digest.hexdigest()[:32]}",
    )


def _flushed(workspace: Workspace) -> list[FlushedObject]:
    for _attempt in range(2):
        workspace.flush()
        if not workspace.dirty():
            return workspace.flushed_objects()
    raise Conflict(
        f"workspace {workspace.name!r} kept changing while it was flushed for a commit; "
        "commit again once writers pause",
        workspace=workspace.name,
    )


def _changes(current: Iterator[Record], wanted: dict[str, Record]) -> Iterator[Change]:
    """Deletes for records gone from the workspace, Puts for new or changed files."""
    seen = set()
    for record in current:
        seen.add(record.key)
        new = wanted.get(record.key)
        if new is None:
            yield Delete(record.key)
        elif (record.url, record.etag, record.size) != (new.url, new.etag, new.size):
            yield Put(new)
    for key in sorted(wanted.keys() - seen):
        yield Put(wanted[key])
