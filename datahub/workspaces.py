"""Commit a flushed workspace as a dataset version (training outputs are data too).

Lives outside ``datahub.cache`` because the cache knows nothing of the catalog: this module
is the one place the two meet. Records point at the flushed origin objects with the etag
(and sha256) the flush recorded, so the version is immutable like any other (promise 1).
Only the differences from the dataset's head are committed, and the commit id is derived
from the base and the content, so retrying after a lost reply does not commit twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator

from datahub.cache.writeback import FlushedObject, Workspace, open_workspace
from datahub.catalog.model import Change, Delete, Put, Record, Version
from datahub.config import Config
from datahub.errors import Conflict, DatasetNotFound, VersionNotFound

log = logging.getLogger(__name__)


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


def finish_workspace(name: str, config: Config, commit_to: str | None = None) -> Version | None:
    """Push an unheld workspace's acknowledged files to the object store, and commit them if asked.

    For a supervisor (the CSI node plugin) after the workspace's mount daemon is gone: if
    the daemon's own flush failed (the object store was down), the files are safe in the
    journal and shared tier, but nothing else would ever push them out. Opening the
    workspace replays its journal; raises if the flush or commit fails, so the caller retries.
    """
    from datahub.catalog import open_catalog
    from datahub.storage import StoreRegistry

    with StoreRegistry(config) as stores:
        workspace = open_workspace(name, config, stores, background=False)
        try:
            dirty = workspace.dirty()
            if dirty:
                log.warning(
                    "workspace %s still had %d dirty file(s) after unmount: flushing", name, len(dirty)
                )
                workspace.flush()
            if not commit_to:
                return None
            catalog = open_catalog(config.resolved_catalog_url)
            try:
                version = commit_workspace(workspace, catalog, commit_to, message=f"workspace {name}")
            finally:
                catalog.close()
            log.info("workspace %s is %s@v%d", name, commit_to, version.seq)
            return version
        finally:
            workspace.close()


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
