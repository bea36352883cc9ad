"""Which object URLs a commit over HTTP may record (the confused-deputy rule, docs/api.md "Record URLs").

Why: a record's URL is read with the deployment's credentials, not the committer's (a mount
process with the CSI plugin's keys, the API server's previews, pack workers). Before this
rule any writer of any dataset, one it created itself included, could commit
``s3://<platform bucket>/<another tenant's key>``, mount its dataset and read bytes it was
never granted. So, over HTTP, a caller that is not a global admin may put a record only if

- its URL is under a prefix a global admin allowed: the dataset's ``sources`` or the
  server's ``api.commit_sources`` (``datahub.catalog.sources.under``); or
- it is a content-addressed blob the platform itself names
  (``<objects_url>/blobs/sha256/<ab>/<cd>/<64 hex>``): the hash is the capability, argued
  in docs/api.md; or
- it is a shard or the index of the pack job the commit's lineage names (remote route,
  ``lineage.kind == "pack"``), when the server's task queue holds that job with this dataset
  as its target: a shard exactly as a DONE task reported it, named as that task's shard
  (``datahub.pack.job.shard_object_name``, the finalize's own check), the index named
  ``packs/<folder>/index-<16 hex>.json``, the job's folder (``datahub.pack.job.objects_dir``); or

- the same key already holds the same URL, etag and size in a version the caller may read:
  this dataset's head (a label edit re-puts what is there) or the version the commit's
  lineage names as its source, if the caller may read that dataset (a copy such as LabelX's
  or a derive done on the client). One batched, indexed lookup by key per such put, only
  for puts the prefixes did not allow.

Whichever of these allows it, a put under ``<objects_url>/blobs/`` that claims a checksum
must be a blob the platform names and claim that blob's own hash: ``commit_workspace`` kept
an unchanged file's head record by its ``(checksum, size)`` alone when it pointed under the
blobs, so a writer's record naming its own blob with another file's checksum (every reader
sees the checksums), or a re-put of a blob record with another checksum, pointed that file at
the writer's bytes at the next workspace commit (review13). ``_head_blobs`` itself now keeps
only the record at the file's own key whose URL is the blob its checksum names.

``file://`` and ``rados://`` (the deployment's own disk and Ceph pool) stay global-admin
only, whatever the sources say. Global admins and local mode are not restricted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from datahub.api.access import Principal
from datahub.api.schemas import ChangeIn, PutChange, to_change
from datahub.catalog.model import Change, Dataset, Put, Record
from datahub.catalog.sources import check_source, under
from datahub.errors import AccessDenied, InvalidInput, JobNotFound, VersionNotFound
from datahub.storage import split_object_url
from datahub.tasks.base import DONE

BATCH = 512  # changes held back at most while their puts wait for one batched lookup
SETTING = "api.commit_sources"

# Storage only the deployment itself reaches: the server's disk (file://) and its Ceph pool
# (rados://, the shared cache tier, read with the server's and the nodes' Ceph identity).
_SERVER_LOCAL = {"file": "a server-local file", "rados": "an object in the deployment's own Ceph pool"}


def server_sources(setting: str) -> tuple[str, ...]:
    """The server-wide prefixes of ``api.commit_sources`` (space-separated), checked."""
    try:
        return tuple(check_source(prefix, "*") for prefix in setting.split())
    except InvalidInput as exc:
        raise InvalidInput(f"setting {SETTING}: {exc}", setting=SETTING) from None


class PlatformBlobs:
    """The content-addressed blobs the platform writes under ``objects_url``
    (``datahub.ingest.blobs.blob_key``): the full 64-digit hash, nothing shorter. URLs are
    compared with the scheme in lower case, as the storage layer reads them."""

    def __init__(self, objects_url: str) -> None:
        self.root = root = _lower_scheme(objects_url.rstrip("/"))
        self._scheme, _, rest = root.partition("://")
        self._after = f"://{rest}/blobs/"  # what follows the scheme in every URL under the blobs
        self._blob = re.compile(
            rf"{re.escape(root)}/blobs/sha256/([0-9a-f]{{2}})/([0-9a-f]{{2}})/(\1\2[0-9a-f]{{60}})"
        )

    def named(self, url: str) -> bool:
        """Whether ``url`` is a blob the platform names."""
        return self._blob.fullmatch(_lower_scheme(url)) is not None

    def hint(self, url: str) -> str:
        """What to change when ``url`` is laid out as a blob but under another root: the client
        that pinned it (``import --copy``, a workspace commit) has an ``objects_url`` other than
        the server's, its default ``file://<home>/objects`` say. "" for any other URL."""
        if self.named(url) or not _ELSEWHERE.search(url):
            return ""
        return (
            "; it is a blob pinned under another objects_url than the server's: set "
            f'objects_url = "{self.root}" in the configuration of the client that made it (or '
            "DATAHUB_OBJECTS_URL), "
            "so import --copy and workspace commits pin their blobs where the platform reads them"
        )

    def claims_other_content(self, record: Record) -> bool:
        """Whether ``record`` points under the blobs with a checksum that is not its blob's hash.
        A put with no checksum, or not under the blobs, costs one ``startswith``."""
        url, n = record.url, len(self._scheme)
        if not record.checksum or not url.startswith(self._after, n) or url[:n].lower() != self._scheme:
            return False
        found = self._blob.fullmatch(_lower_scheme(url))
        return found is None or record.checksum != f"sha256:{found[3]}"


_ELSEWHERE = re.compile(r"/blobs/sha256/([0-9a-f]{2})/([0-9a-f]{2})/\1\2[0-9a-f]{60}$")  # any root's blob


def _lower_scheme(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme.lower()}{sep}{rest}"


class RecordUrls:
    """The rule for one commit by ``principal`` to ``dataset``; ``source`` is the readable
    version (dataset, seq) its lineage names, if any."""

    def __init__(
        self,
        catalog,  # datahub.catalog.Catalog
        principal: Principal,
        dataset: Dataset,
        *,
        server_prefixes: tuple[str, ...] = (),
        blobs: PlatformBlobs | None = None,
        source: tuple[str, int] | None = None,
        pack: PackJob | None = None,
    ) -> None:
        self.catalog, self.principal, self.dataset = catalog, principal, dataset
        self.prefixes = (*dataset.sources, *server_prefixes)
        self.blobs, self.source, self.pack = blobs, source, pack

    def changes(self, changes: Iterable[ChangeIn]) -> Iterator[Change]:
        """``changes`` as catalog changes, in order; AccessDenied (403) at the first put this
        caller may not make, which aborts the commit with nothing written."""
        window: list[Change] = []
        unproven: list[Put] = []
        for change in changes:
            if isinstance(change, PutChange):
                self._check_scheme(change)
            converted = to_change(change)
            if self.principal.is_admin:
                yield converted
                continue
            if isinstance(converted, Put):
                self._check_checksum(converted.record)
                if not self._allowed(converted.record):
                    unproven.append(converted)
            window.append(converted)
            if not unproven or len(window) >= BATCH:
                self._prove(unproven)
                yield from window
                window, unproven = [], []
        self._prove(unproven)
        yield from window

    def _check_scheme(self, change: PutChange) -> None:
        # schemes are case-insensitive (the storage layer reads FILE:// as file://), so is this
        scheme = change.record.url.partition("://")[0].lower()
        if scheme in _SERVER_LOCAL and not self.principal.is_admin:
            raise AccessDenied(
                f"record {change.record.key!r} for dataset {self.dataset.name!r} points at "
                f"{_SERVER_LOCAL[scheme]} ({change.record.url}); only global admins may commit "
                f"{scheme}:// URLs over HTTP{self._hint(change.record.url)}",
                dataset=self.dataset.name,
                key=change.record.key,
            )

    def _allowed(self, record: Record) -> bool:
        url = record.url
        return (
            under(url, self.prefixes)
            or (self.blobs is not None and self.blobs.named(url))
            or (self.pack is not None and self.pack.made(record))
        )

    def _check_checksum(self, record: Record) -> None:
        """A put under the platform's blobs claims no content but its blob's (module docstring)."""
        if self.blobs is None or not self.blobs.claims_other_content(record):
            return
        name = self.dataset.name
        raise AccessDenied(
            f"record {record.key!r} of the commit to dataset {name!r} points under the platform's "
            f"blobs ({record.url}) with checksum {record.checksum!r}, which is not the blob's own "
            "hash; a blob is named by its content: record its sha256, or no checksum",
            dataset=name,
            key=record.key,
            url=record.url,
        )

    def _prove(self, puts: list[Put]) -> None:
        """Each put's record already stands at its key in a version this caller may read."""
        if not puts:
            return
        keys = list(dict.fromkeys(p.record.key for p in puts))
        name = self.dataset.name
        known = [self._lookup(name, self.catalog.store.head(name), keys)]
        if self.source is not None:
            known.append(self._lookup(*self.source, keys))
        for put in puts:
            if not any(_same(found.get(put.record.key), put.record) for found in known):
                raise self._refused(put.record)

    def _lookup(self, dataset: str, seq: int, keys: list[str]) -> dict[str, Record]:
        if seq <= 0:
            return {}
        try:
            return self.catalog.lookup_records(dataset, seq, keys)
        except VersionNotFound:  # a lineage naming a version that is not there proves nothing
            return {}

    def _hint(self, url: str) -> str:
        return self.blobs.hint(url) if self.blobs is not None else ""

    def _refused(self, record: Record) -> AccessDenied:
        name = self.dataset.name
        return AccessDenied(
            f"record {record.key!r} of the commit to dataset {name!r} points at {record.url}, which is "
            f"under none of the dataset's sources ({', '.join(self.prefixes) or 'none'}) and is not "
            "already a record this caller may read (same key, URL, etag and size); the platform would "
            "read it with its own credentials. Ask a global admin to add the prefix to the dataset's "
            f"sources (datahub dataset update {name} --add-source s3://bucket/prefix/){self._hint(record.url)}",
            dataset=name,
            key=record.key,
            url=record.url,
        )


class PackJob:
    """What a pack job's finalize commits: its DONE tasks' shards and its index (see above)."""

    def __init__(self, folder: str, shards: frozenset[tuple[str, str, int]]) -> None:
        self.shards = shards  # folder: the job's objects_dir (datahub.pack.job)
        self._index = re.compile(rf"(?:[\s\S]*/)?packs/{re.escape(folder)}/index-[0-9a-f]{{16}}\.json")

    def made(self, record: Record) -> bool:
        if (record.url, record.etag, record.size) in self.shards:
            return True
        try:
            return self._index.fullmatch(split_object_url(record.url)[1]) is not None
        except InvalidInput:
            return False


def pack_job(tasks, dataset: str, lineage: Mapping[str, Any] | None) -> PackJob | None:
    """The pack job a commit's lineage names, if the server's task queue (``TaskQueue``) holds
    it with ``dataset`` as its target; the shards its DONE tasks reported under their own names."""
    from datahub.pack.job import objects_dir, shard_object_name

    job = (lineage or {}).get("job")
    if (lineage or {}).get("kind") != "pack" or not isinstance(job, str):
        return None
    try:
        meta = tasks.get_job(job).meta
    except JobNotFound:
        return None
    if meta.get("target") != dataset:
        return None
    folder = objects_dir(job, meta)
    shards = set()
    for task in tasks.tasks(job):
        result = task.result
        url, checksum = result.get("url"), result.get("checksum")
        digest = checksum[7:] if isinstance(checksum, str) and checksum.startswith("sha256:") else ""
        if task.state != DONE or not isinstance(url, str) or len(digest) != 64:
            continue
        try:
            key = split_object_url(url)[1]
        except InvalidInput:
            continue
        name = shard_object_name(folder, task.index, digest)
        if key == name or key.endswith("/" + name):
            shards.add((url, result.get("etag"), result.get("size")))
    return PackJob(folder, frozenset(shards))


def _same(found: Record | None, put: Record) -> bool:
    return found is not None and (found.url, found.etag, found.size) == (put.url, put.etag, put.size)


def commit_rule(
    services, principal: Principal, dataset: Dataset, view=None, lineage: Mapping[str, Any] | None = None
) -> RecordUrls:
    """The rule for a commit served by ``services`` (``datahub.api.deps.Services``); ``view``
    (the caller's LineageView) and ``lineage`` for a remote commit that sends one."""
    config = services.config
    if principal.is_admin:  # nothing is checked: no lineage, task queue or setting is read
        return RecordUrls(services.catalog, principal, dataset)
    return RecordUrls(
        services.catalog,
        principal,
        dataset,
        server_prefixes=server_sources(config.api.commit_sources),
        blobs=PlatformBlobs(config.resolved_objects_url),
        source=view.readable_source(lineage) if view is not None and lineage else None,
        pack=pack_job(services.tasks, dataset.name, lineage) if lineage else None,
    )
