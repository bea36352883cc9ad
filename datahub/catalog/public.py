"""The public JSON form of a dataset, a version, a record and a diff entry: one dict each.

Why a module of plain functions: the CLI prints these rows (``datahub ls --json``, ``log``,
``diff``, ``commit``, ``tag``, ``derive``, ``export``, ``dataset list``) and the API answers
with them. The CLI built the API's pydantic models (``datahub.api.schemas``) to dump them
again, which made every such command import and build the API's 20-odd request and response
models (0.05 of the 0.39 CPU-s of a small ``datahub ls``, docs/benchmarks.md, suite36) and
validate each record it printed (0.15 CPU-s of a 20,000-record ``ls --json``).
The API's ``*_public`` models are built from these rows, so both show the same fields;
``tests/cli/test_public_rows.py`` holds the rows equal to the models' JSON dumps.

Catalog objects hold decoded JSON (meta, labels, lineage), so a shallow copy of each mapping
is already JSON; the numbers are coerced as the models' fields are (``float`` timestamps).
"""

from __future__ import annotations

from typing import Any

from datahub.catalog.model import Dataset, DiffEntry, Record, Version


def dataset_row(d: Dataset, head: int) -> dict[str, Any]:
    """``d`` as the API's ``DatasetPublic`` shows it, with ``head`` (its newest version, 0 if none)."""
    return {
        "name": d.name,
        "description": d.description,
        "source": d.source,
        "owner": d.owner,
        "acl": dict(d.acl),
        "sources": list(d.sources),
        "created_at": float(d.created_at),
        "head": head,
        "revision": d.revision,
    }


def version_row(v: Version) -> dict[str, Any]:
    """``v`` as the API's ``VersionPublic`` shows it."""
    return {
        "dataset": v.dataset,
        "seq": v.seq,
        "parent": v.parent,
        "message": v.message,
        "author": v.author,
        "created_at": float(v.created_at),
        "tags": list(v.tags),
        "record_count": v.record_count,
        "total_bytes": v.total_bytes,
        "added": v.added,
        "removed": v.removed,
        "modified": v.modified,
        "lineage": dict(v.lineage),
    }


def record_row(r: Record) -> dict[str, Any]:
    """``r`` as the API's ``RecordPublic`` shows it."""
    return {
        "key": r.key,
        "url": r.url,
        "etag": r.etag,
        "size": r.size,
        "checksum": r.checksum,
        "meta": dict(r.meta),
        "labels": dict(r.labels),
    }


def diff_row(e: DiffEntry) -> dict[str, Any]:
    """``e`` as the API's ``DiffEntryPublic`` shows it."""
    return {
        "kind": e.kind,
        "key": e.key,
        "old": record_row(e.old) if e.old is not None else None,
        "new": record_row(e.new) if e.new is not None else None,
    }
