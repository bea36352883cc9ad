"""Sources of an import, each turned into a stream of SourceItems in key order.

- a prefix ``s3://bucket/prefix``, ``memory://name`` or a local directory (path or
  ``file://``): every object below it; the key is the object's path relative to the prefix
  (empty "folder" marker objects, ``a/b/``, are skipped);
- a JSON-lines manifest (a local file): see ``datahub.ingest.manifest``.

Listings from an ObjectStore already arrive in key order; a manifest is sorted externally.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.ingest.items import SourceItem
from datahub.ingest.listing import parallel_list
from datahub.ingest.manifest import MANIFEST_SUFFIXES, read_manifest
from datahub.ingest.sorting import sorted_items
from datahub.storage import StoreRegistry, open_store
from datahub.validation import check_new_key


def describe_source(src: str) -> tuple[str, str]:
    """Classify ``src`` as ("prefix", root URL) or ("manifest", local path).

    A local path or ``file://`` URL naming a regular file is a manifest; a directory is a
    prefix. Other schemes (``s3://``, ``memory://``) are prefixes.
    """
    scheme = urlsplit(src).scheme
    if scheme in ("", "file"):
        path = Path(unquote(urlsplit(src).path) if scheme == "file" else src).expanduser().resolve()
        if path.is_file():
            return "manifest", str(path)
        if path.is_dir():
            return "prefix", path.as_uri()
        if path.exists():  # a named pipe, a socket, a device: a manifest is read twice
            raise InvalidInput(
                f"import source {src!r} is neither a regular file nor a directory (a named pipe?): "
                "a manifest is read twice (its common directory, then its lines), so save it to a "
                "file and import that",
                source=src,
            )
        raise InvalidInput(
            f"import source {src!r} does not exist: give a directory, a .jsonl manifest or an s3:// prefix",
            source=src,
        )
    if scheme in ("s3", "memory"):
        if src.endswith(MANIFEST_SUFFIXES):
            raise InvalidInput(
                f"import source {src!r} looks like a manifest in object storage; download it and "
                "import the local file",
                source=src,
            )
        return "prefix", src.rstrip("/")
    raise InvalidInput(
        f"import source {src!r} has an unsupported scheme {scheme!r}: use s3://, file:// or a local path",
        source=src,
    )


def source_items(
    src: str,
    config: Config,
    stores: StoreRegistry,
    *,
    sort_budget_bytes: int = 32 * 1024**2,
) -> Iterator[SourceItem]:
    """All objects of ``src`` in strictly increasing key order (validated keys)."""
    kind, where = describe_source(src)
    if kind == "manifest":
        yield from sorted_items(read_manifest(where, stores), budget_bytes=sort_budget_bytes)
    else:
        yield from _list_prefix(where, config)


def _list_prefix(root_url: str, config: Config) -> Iterator[SourceItem]:
    store = open_store(root_url, config)
    try:
        for info in parallel_list(store):  # sub-prefixes listed on several threads, in key order
            if (info.key.endswith("/") or not info.key) and info.size == 0:
                # an S3 "folder" marker made by consoles, not a file; the prefix's own (its key
                # below the prefix is empty) too. Why: ``s3://b/train`` with the console's
                # ``train/`` failed whole: "a record key must be a non-empty relative path"
                continue
            if not info.key:
                raise InvalidInput(
                    f"import source {root_url!r}: the object {store.url_for('')!r} holds {info.size} "
                    "bytes under the prefix's own name, which can be no record (its key below the "
                    "prefix is empty); move it below the prefix, or import the prefix above it",
                    source=root_url,
                )
            check_new_key(info.key)
            yield SourceItem(info.key, store.url_for(info.key), info.etag, info.size)
    finally:
        store.close()
