"""JSON-lines import manifests.

Each non-blank line is either a bare URL (``s3://bucket/a/b.jpg``, ``file:///data/a/b.jpg``,
optionally as a JSON string) or an object ``{"url": …, "key": …, "labels": {…}, "meta": {…}}``
(only ``url`` is required). A line without ``key`` gets the URL's path relative to the
longest common directory of all such lines (``s3://b/train/cat/1.jpg`` and
``s3://b/train/dog/2.jpg`` -> ``cat/1.jpg``, ``dog/2.jpg``); those lines must then share
one scheme and bucket. Give explicit keys to pin keys across re-imports of a growing
manifest.

Every problem is a ManifestError naming the line number, raised before anything is
committed. The file is read twice (validate + common directory, then stat objects), so
memory stays bounded whatever its length.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from datahub.errors import DatahubError, InvalidInput, ManifestError
from datahub.ingest.items import SourceItem
from datahub.storage import StoreRegistry, split_object_url
from datahub.storage.urls import decode_key
from datahub.validation import MAX_JSON_DEPTH, check_json_field, check_new_key

_FIELDS = {"url", "key", "labels", "meta"}
STAT_BATCH = 256
STAT_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class ManifestLine:
    number: int
    url: str
    key: str | None
    labels: dict[str, Any] | None
    meta: dict[str, Any] | None


def parse_lines(path: str) -> Iterator[ManifestLine]:
    """Parse and validate every line (not the objects themselves)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; generator
    except OSError as exc:
        raise InvalidInput(f"cannot read manifest {path}: {exc.strerror}", path=path) from exc
    with fh:
        for number, raw in enumerate(fh, start=1):  # bytes, so a bad line is found by its number
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise ManifestError(
                    f"manifest {path} line {number}: not valid UTF-8", path=path, line=number
                ) from None
            if text:
                yield _parse_line(path, number, text)


MANIFEST_SUFFIXES = (".jsonl", ".ndjson")  # what a manifest is named, when it is


def _parse_line(path: str, number: int, text: str) -> ManifestLine:
    # a first line that is no JSON, of a file not named as a manifest: most likely a file given
    # to import as itself (``datahub import notes.txt --to d`` said "URL 'hi' has an unsupported
    # scheme", newuser36)
    hint = (
        f"; {path} is read as a manifest (one URL or JSON object per line): to import files "
        "themselves, give their directory"
        if number == 1 and text[0] not in '{["' and not path.endswith(MANIFEST_SUFFIXES)
        else ""
    )

    def fail(why: str) -> ManifestError:
        return ManifestError(f"manifest {path} line {number}: {why}{hint}", path=path, line=number)

    if text[0] in '{["':
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise fail(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:  # the decoder recurses: about 1,000 levels end it
            raise fail(f"nested far deeper than labels and meta may be ({MAX_JSON_DEPTH} levels)") from None
    else:
        value = text
    if isinstance(value, str):
        value = {"url": value}
    if not isinstance(value, dict):
        raise fail("expected a URL or a JSON object with a 'url' field")
    unknown = set(value) - _FIELDS
    if unknown:
        raise fail(f"unknown field(s) {', '.join(sorted(unknown))}; allowed: url, key, labels, meta")
    url = value.get("url")
    if not isinstance(url, str):
        raise fail("missing 'url' (a string such as s3://bucket/key or file:///path)")
    _check_url(url, fail)
    key = value.get("key")
    if key is not None:
        if not isinstance(key, str):
            raise fail("'key' must be a string")
        try:
            check_new_key(key)
        except DatahubError as exc:
            raise fail(exc.message) from None
    for name in ("labels", "meta"):
        if value.get(name) is not None and not isinstance(value[name], dict):
            raise fail(f"'{name}' must be a JSON object")
        try:  # the commit's own limits, here so the error names the line (and nothing is created)
            check_json_field(value.get(name), name, key if isinstance(key, str) else url)
        except DatahubError as exc:
            raise fail(exc.message) from None
    return ManifestLine(number, url, key, value.get("labels"), value.get("meta"))


def _check_url(url: str, fail) -> None:
    parts = urlsplit(url)
    if parts.scheme in ("s3", "memory"):
        try:  # the reader's own parser: a raw '?' or '#' in an s3:// key is part of the key
            split_object_url(url)
        except InvalidInput as exc:
            raise fail(
                f"URL {url!r} must name an object: {parts.scheme}://bucket/key ({exc.message})"
            ) from None
    elif parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/") or parts.path.endswith("/"):
            raise fail(f"URL {url!r} must be an absolute file path: file:///dir/file")
    else:
        raise fail(f"URL {url!r} has an unsupported scheme: use s3://, file:// or memory://")


def _root(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/"


def common_directory(path: str) -> str | None:
    """Longest common directory URL of the lines without an explicit key (None: there are none)."""
    common: str | None = None
    first_root = ""
    for line in parse_lines(path):
        if line.key is not None:
            continue
        directory = line.url[: line.url.rfind("/") + 1]
        if common is None:
            common, first_root = directory, _root(line.url)
            continue
        if _root(line.url) != first_root:
            raise ManifestError(
                f"manifest {path} line {line.number}: URL {line.url!r} is not under {first_root}; "
                "lines from different buckets or schemes need an explicit 'key'",
                path=path,
                line=line.number,
            )
        if not directory.startswith(common):
            shared = os.path.commonprefix([common, directory])
            common = max(shared[: shared.rfind("/") + 1], first_root, key=len)
    return common


def read_manifest(
    path: str, stores: StoreRegistry, *, concurrency: int = STAT_CONCURRENCY
) -> Iterator[SourceItem]:
    """Yield one SourceItem per line (in file order), with size and etag from a stat of the URL."""
    common = common_directory(path)

    def resolve(line: ManifestLine) -> SourceItem:
        key = line.key
        if key is None:  # the URL below the common directory, decoded as the URL's scheme says
            key = line.url[len(common or "") :]
            key = unquote(key) if line.url.startswith("file:") else decode_key(key)
        try:
            check_new_key(key)
            store, object_key = stores.for_url(line.url)
            info = store.stat(object_key)
        except DatahubError as exc:
            details = {**exc.details, "line": line.number}
            raise type(exc)(f"manifest {path} line {line.number}: {exc.message}", **details) from exc
        return SourceItem(key, line.url, info.etag, info.size, line.labels, line.meta, line.number)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="manifest-stat") as pool:
        batch: list[ManifestLine] = []
        for line in parse_lines(path):
            batch.append(line)
            if len(batch) >= STAT_BATCH:
                yield from pool.map(resolve, batch)
                batch = []
        if batch:
            yield from pool.map(resolve, batch)
