"""A CatalogStore over the datahub HTTP API: ``catalog_url = http(s)://host:port``.

Why: nodes (mounts, CSI node plugins, pack workers, LabelX) then need only an API token
(``DATAHUB_API_TOKEN``) and scoped S3 credentials, never the database's. Every call maps onto
``/v1/remote`` (the store contract: exact sequence numbers, NDJSON listings ending with an
``{"end": n}`` line; record and diff listings open with a header line naming their format and
columns, then carry one JSON array per item) or the public dataset routes, and every error answer
``{"error": {code, message, details}}`` is raised again as the same ``datahub.errors`` class
a local store raises.

Failures: connection errors, timeouts and 5xx answers are retried a bounded number of times
with exponential backoff inside a total time budget, then raise CatalogUnavailable naming the
URL (never the token). A commit is sent with a commit id (made here when the caller gave
none) from a spooled copy of its body, so a retry after a lost answer returns the version the
first attempt made instead of committing twice; a dataset creation retried after a lost
answer that finds the name taken returns the dataset when it is as asked (AlreadyExists only
when it is not). A listing cut short is an error, never a
shorter listing.
"""

from __future__ import annotations

import errno
import hashlib
import json
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import islice as _islice
from itertools import repeat
from itertools import starmap as _starmap
from operator import itemgetter
from operator import lt as _lt
from typing import IO, Any
from urllib.parse import quote

from datahub.catalog.filter import RecordFilter
from datahub.catalog.leases import HIDDEN_OWNER, LIST_PAGE, Lease, LeaseChange, check_page
from datahub.catalog.model import (
    DIR_FILE_COLUMNS,
    BrowserSession,
    Change,
    Dataset,
    Delete,
    DiffEntry,
    DirFile,
    Patch,
    Put,
    Record,
    TokenInfo,
    Version,
    record_from_row,
)
from datahub.catalog.record_json import RECORD_COLUMNS
from datahub.catalog.store import CatalogStore, revision_mismatch, stale_base
from datahub.errors import (
    AlreadyExists,
    CatalogUnavailable,
    InvalidInput,
    NoSpace,
    NotFound,
    PreconditionFailed,
)

# The listing formats of /v1/remote (the first line of each listing; the server writes them
# from these): one JSON array per item in this column order (record_json), where objects
# with key names cost the client ~1.8x the parsing. Change the format name with the columns.
RECORDS_HEADER = {"format": "datahub.records/2", "columns": list(RECORD_COLUMNS)}
DIFF_HEADER = {"format": "datahub.diff/2", "columns": ["kind", "key", "old", "new"]}
# one directory level: a DirFile row per file (key, url, etag, size, mtime: what a mount shows,
# not the whole record), a JSON string (``prefix + name + "/"``) per subdirectory
DIRECTORY_HEADER = {"format": "datahub.directory/2", "columns": list(DIR_FILE_COLUMNS)}
_first = itemgetter(0)
_SPOOL_BYTES = 8 * 1024 * 1024  # a commit body beyond this is spooled to a temporary file
_CHUNK = 256 * 1024
_BATCH_KEYS = 10000
# Seconds a commit's answer is waited for. The server answers a commit once it is done: after
# its turn (a SQLite catalog's commits queue for up to 600 s, ``sqlite_gate``) and the commit
# itself. Cut at the ordinary read timeout (30 s), every retry of the same commit id waited on
# that same turn and was cut too, and the caller got catalog_unavailable for a version the
# server made (without a commit id of its own, it would then commit the changes again).
COMMIT_TIMEOUT = 900.0


class HttpCatalogStore(CatalogStore):
    """The CatalogStore of a remote datahub API server (one pooled ApiClient)."""

    def __init__(
        self, url: str, token: str | None = None, *, commit_timeout: float = COMMIT_TIMEOUT, **options: Any
    ) -> None:
        """``options``: timeout, connect_timeout, attempts, backoff, budget (see ApiClient).
        ``commit_timeout``: how long a commit's answer is waited for (``COMMIT_TIMEOUT``)."""
        from datahub.api_client import ApiClient  # httpx (~0.3 CPU-s): not for the server's routes

        self._api = ApiClient(url, token, **options)
        self.commit_timeout = commit_timeout
        self.url = self._api.url

    def __repr__(self) -> str:
        return f"HttpCatalogStore({self.url!r})"  # never the token

    # --- datasets -------------------------------------------------------------------------------
    def create_dataset(self, dataset: Dataset) -> Dataset:
        body = {
            "name": dataset.name,
            "description": dataset.description,
            "source": dataset.source,
            "owner": dataset.owner,
            "acl": dict(dataset.acl),
        }
        from datahub.api_client import LOST_ANSWER  # imported by __init__ already

        what = f"create dataset {dataset.name!r}"
        answer = self._api.json("POST", "/v1/remote/datasets", what=what, json=body, done_if=AlreadyExists)
        if answer is not LOST_ANSWER:
            return self._api.decode(what, _dataset, answer)
        # The first attempt's answer was lost and the retry found the name taken: the dataset
        # is ours when it is what was asked for (an identical one made by another caller in
        # that window is indistinguishable and as good); anything else is someone else's.
        there = self.get_dataset(dataset.name)
        asked = (dataset.description, dataset.source, dict(dataset.acl))
        if (there.description, there.source, dict(there.acl)) == asked and dataset.owner in ("", there.owner):
            return there
        raise AlreadyExists(
            f"dataset {dataset.name!r} already exists (made by {there.owner or 'a bucket mount'}, not as asked "
            "here; this client's first request lost its answer): pick another name or use that dataset",
            dataset=dataset.name,
        )

    def get_dataset(self, name: str) -> Dataset:
        what = f"get dataset {name!r}"
        return self._api.decode(
            what, _dataset, self._api.json("GET", f"/v1/datasets/{_seg(name)}", what=what)
        )

    def caller_role(self, name: str) -> tuple[str, str]:
        """(this token's principal, its highest role on dataset ``name``), as the server decides
        (``GET /v1/datasets/{name}/access``); DatasetNotFound if the token may not read it."""
        what = f"ask for this token's role on dataset {name!r}"
        answer = self._api.json("GET", f"/v1/datasets/{_seg(name)}/access", what=what)
        return self._api.decode(what, lambda a: (str(a["principal"]), str(a["role"])), answer)

    def list_datasets(self) -> Iterator[Dataset]:
        what = "list datasets"
        answer = self._api.json("GET", "/v1/datasets", what=what)
        if not isinstance(answer, list):
            raise self._api.garbage(what, "something that is not a list")
        return iter([self._api.decode(what, _dataset, d) for d in answer])

    def update_dataset(
        self, name: str, fields: Mapping[str, Any], *, expected_revision: int | None = None
    ) -> Dataset:
        what = f"update dataset {name!r}"
        headers = {"If-Match": f'"r{expected_revision}"'} if expected_revision is not None else {}
        body = {k: (dict(v) if k == "acl" else list(v) if k == "sources" else v) for k, v in fields.items()}
        from datahub.api_client import LOST_ANSWER  # imported by __init__ already

        answer = self._api.json(
            "PATCH",
            f"/v1/datasets/{_seg(name)}",
            what=what,
            json=body,
            headers=headers,
            done_if=PreconditionFailed if expected_revision is not None else None,
        )
        if answer is not LOST_ANSWER:
            return self._api.decode(what, _dataset, answer)
        # The first attempt's answer was lost and the retry found the next revision: it is ours
        # when that revision holds what was asked for (an identical update by another caller in
        # that window is indistinguishable and as good); anything else is someone else's.
        there = self.get_dataset(name)
        now = {
            k: (dict(v) if k == "acl" else list(v) if k == "sources" else v)
            for k, v in _fields(there).items()
        }
        if (
            expected_revision is not None
            and there.revision == expected_revision + 1
            and all(now.get(k) == v for k, v in body.items())
        ):
            return there
        raise revision_mismatch(there, expected_revision)

    # --- versions -------------------------------------------------------------------------------
    def commit(
        self,
        dataset: str,
        base: int,
        changes: Iterable[Change],
        *,
        message: str = "",
        author: str = "",
        lineage: dict | None = None,
        commit_id: str | None = None,
    ) -> Version:
        what = f"commit to dataset {dataset!r} on version {base}"
        if commit_id is None:
            self._check_base(dataset, base)
        header = {
            "base": base,
            "message": message,
            "author": author,
            "lineage": dict(lineage) if lineage else None,
            "commit_id": commit_id or f"http-{uuid.uuid4().hex}",
        }
        with _spooled(header, changes, what) as (body, size):

            def attempt() -> Any:
                body.seek(0)
                response = self._api.client.post(
                    f"/v1/remote/datasets/{_seg(dataset)}/commits",
                    content=_chunks(body),
                    headers={"Content-Type": "application/x-ndjson", "Content-Length": str(size)},
                    timeout=self._api.read_timeout(self.commit_timeout),
                )
                self._api.check(response, what)
                try:
                    return response.json()
                except ValueError:
                    from datahub.api_client import Retry

                    raise Retry(f"answered {what} with something that is not JSON") from None

            # an attempt may take up to commit_timeout: it does not use up the retries' budget
            answer = self._api.call(what, attempt, budget=self._api.budget + self.commit_timeout)
            return self._api.decode(what, _version, answer)

    def _check_base(self, dataset: str, base: int) -> None:
        """StaleBase before a single change is read, as a local store refuses a stale base: the
        Catalog may then retry a commit "on the head" with the new head. Skipped when the caller
        sent a commit id: its retry must reach the server, which answers the version that id made."""
        head = self.head(dataset)
        if head != base:
            raise stale_base(dataset, base, head)

    def head(self, dataset: str) -> int:
        what = f"head of dataset {dataset!r}"
        answer = self._api.json("GET", f"/v1/remote/datasets/{_seg(dataset)}/head", what=what)
        return self._api.decode(what, lambda a: int(a["head"]), answer)

    def get_version(self, dataset: str, seq: int) -> Version:
        what = f"version {seq} of dataset {dataset!r}"
        answer = self._api.json("GET", f"/v1/remote/datasets/{_seg(dataset)}/versions/{int(seq)}", what=what)
        return self._api.decode(what, _version, answer)

    def list_versions(self, dataset: str) -> Iterator[Version]:
        what = f"the versions of dataset {dataset!r}"
        for obj in self._api.lines(f"/v1/remote/datasets/{_seg(dataset)}/versions", what=what, params={}):
            yield self._api.decode(what, _version, obj)

    def set_tag(self, dataset: str, tag: str, seq: int) -> None:
        what = f"tag {tag!r} of dataset {dataset!r}"
        path = f"/v1/remote/datasets/{_seg(dataset)}/tags/{_seg(tag)}"
        self._api.json("PUT", path, what=what, json={"seq": seq})

    def delete_tag(self, dataset: str, tag: str) -> None:
        from datahub.api_client import LOST_ANSWER  # imported by __init__ already

        what = f"delete tag {tag!r} of dataset {dataset!r}"
        path = f"/v1/datasets/{_seg(dataset)}/tags/{_seg(tag)}"
        if self._api.json("DELETE", path, what=what, done_if=NotFound) is LOST_ANSWER:
            # the first attempt's answer was lost and the retry found no tag: that attempt
            # deleted it, unless the dataset itself is not there (DatasetNotFound, as asked)
            self.get_dataset(dataset)

    def tag_target(self, dataset: str, tag: str) -> int:
        what = f"tag {tag!r} of dataset {dataset!r}"
        answer = self._api.json("GET", f"/v1/remote/datasets/{_seg(dataset)}/tags/{_seg(tag)}", what=what)
        return self._api.decode(what, lambda a: int(a["seq"]), answer)

    # --- records --------------------------------------------------------------------------------
    def list_records(
        self,
        dataset: str,
        seq: int,
        *,
        prefix: str = "",
        start_after: str = "",
        limit: int | None = None,
        where: RecordFilter | None = None,
    ) -> Iterator[Record]:
        """Streamed in key order; a stream cut after some records resumes after the last key
        received (up to the client's attempts), so a long listing survives a dropped connection
        without repeating or skipping a record."""
        what = f"the records of version {seq} of dataset {dataset!r}"
        path = f"/v1/remote/datasets/{_seg(dataset)}/records"
        resumes = 0
        while True:
            params: dict[str, Any] = {"seq": seq}
            if prefix:
                params["prefix"] = prefix
            if start_after:
                params["start_after"] = start_after
            if limit is not None:
                params["limit"] = limit
            if where is not None:
                params["filter"] = str(where)
            got = 0
            try:
                for rows in self._api.batches(path, what=what, params=params, header=RECORDS_HEADER):
                    last = self._checked_rows(rows, start_after, what)
                    # record_from_row is called lazily from C: the rows were checked above
                    yield from _starmap(record_from_row, rows)
                    got += len(rows)
                    start_after = last
                return
            except CatalogUnavailable as exc:
                resumes += 1
                if not exc.details.get("cut") or got == 0 or resumes >= self._api.attempts:
                    raise
                if limit is not None:
                    limit -= got
                    if limit <= 0:
                        return

    def list_directory(
        self, dataset: str, seq: int, *, prefix: str = "", start_after: str = "", limit: int | None = None
    ) -> Iterator[DirFile | str]:
        """One request (``/directory``): the server's store lists the level, so a mount's
        lookup in a directory not loaded yet costs one round trip, never one per subdirectory.
        A cut stream is an error (CatalogUnavailable), never a shorter directory."""
        what = f"directory {prefix or '/'!r} of version {seq} of dataset {dataset!r}"
        params: dict[str, Any] = {"seq": seq}
        if prefix:
            params["prefix"] = prefix
        if start_after:
            params["start_after"] = start_after
        if limit is not None:
            params["limit"] = limit
        path = f"/v1/remote/datasets/{_seg(dataset)}/directory"
        previous, cut, width = start_after, len(prefix), len(DIR_FILE_COLUMNS)
        depth = prefix.count("/")
        for rows in self._api.batches(path, what=what, params=params, header=DIRECTORY_HEADER):
            if _files_in_order(rows, prefix, depth, previous, width):
                # a chunk of file rows alone, checked by C loops: yielded as they are
                previous = rows[-1][0]
                yield from map(tuple, rows)
                continue
            for row in rows:  # subdirectories among them, or something to report
                if type(row) is list and len(row) == width and type(key := row[0]) is str:
                    entry: DirFile | str = tuple(row)  # type: ignore[assignment]
                    ok = key.startswith(prefix) and "/" not in key[cut:]
                elif type(row) is str:
                    entry = key = row
                    ok = row.startswith(prefix) and row.endswith("/") and "/" not in row[cut:-1]
                else:
                    raise self._api.garbage(what, "an entry of the wrong shape")
                if not ok or key <= previous:
                    raise self._api.garbage(what, f"entry {key!r} out of order or outside the directory")
                previous = key
                yield entry

    def _checked_rows(self, rows: list[Any], after: str, what: str) -> str:
        """The last key of a chunk of record rows, after checking that every row is an array of
        the 7 columns, every key a string, and the keys rising strictly from ``after``; done
        per chunk in C (``map``), not per record in Python. The other values are the server's,
        which its catalog checked when they were written."""
        if set(map(type, rows)) != {list} or set(map(len, rows)) != {len(RECORD_COLUMNS)}:
            raise self._api.garbage(what, "a record row of the wrong shape")
        keys = list(map(_first, rows))
        if set(map(type, keys)) != {str}:
            raise self._api.garbage(what, "a record row of the wrong shape (a key that is not a string)")
        ordered = (not after or keys[0] > after) and all(map(_lt, keys, _islice(keys, 1, None)))
        if not ordered:
            previous = after
            for key in keys:
                if previous and key <= previous:
                    raise self._api.garbage(what, f"key {key!r} out of order (after {previous!r})")
                previous = key
        return keys[-1]

    def get_record(self, dataset: str, seq: int, key: str) -> Record:
        what = f"record {key!r} of version {seq} of dataset {dataset!r}"
        path = f"/v1/datasets/{_seg(dataset)}/versions/{int(seq)}/records/{quote(key, safe='/')}"
        return self._api.decode(what, _record, self._api.json("GET", path, what=what))

    def get_records(self, dataset: str, seq: int, keys: list[str]) -> dict[str, Record]:
        what = f"records of version {seq} of dataset {dataset!r}"
        found: dict[str, Record] = {}
        for start in range(0, len(keys), _BATCH_KEYS):
            body = {"seq": seq, "keys": keys[start : start + _BATCH_KEYS]}
            answer = self._api.json(
                "POST", f"/v1/remote/datasets/{_seg(dataset)}/records/get", what=what, json=body
            )
            if not isinstance(answer, list):
                raise self._api.garbage(what, "something that is not a list")
            for obj in answer:
                record = self._api.decode(what, _record, obj)
                found[record.key] = record
        return found

    def diff(
        self, dataset: str, a: int, b: int, *, prefix: str = "", start_after: str = ""
    ) -> Iterator[DiffEntry]:
        what = f"the diff of versions {a}..{b} of dataset {dataset!r}"
        params: dict[str, Any] = {"a": a, "b": b} | ({"prefix": prefix} if prefix else {})
        if start_after:
            params["start_after"] = start_after
        path = f"/v1/remote/datasets/{_seg(dataset)}/diff"
        for rows in self._api.batches(path, what=what, params=params, header=DIFF_HEADER):
            if set(map(type, rows)) != {list}:
                raise self._api.garbage(what, "a diff row of the wrong shape")
            yield from [self._api.decode(what, _diff_entry, row) for row in rows]

    # --- API tokens: the server's business --------------------------------------------------------
    def _tokens_refused(self) -> InvalidInput:
        return InvalidInput(
            f"API tokens cannot be managed through the remote catalog {self.url}: run "
            "'datahub token create/list/revoke' on the API server (against its own catalog URL)",
            url=self.url,
        )

    # --- writer leases: /v1/remote/leases (datahub.api.routes.leases) ---------------------------
    def acquire_lease(self, name: str, owner: str, holder: str, ttl: float, dataset: str = "") -> Lease:
        """The server checks the caller's writer role on the commit target (its own read of the
        lease's, and ``dataset``): docs/api.md, "Workspace writer leases"."""
        body: dict[str, Any] = {"owner": owner, "holder": holder, "ttl": ttl}
        if dataset:
            body["dataset"] = dataset
        return self._lease(
            "POST", f"/v1/remote/leases/{_seg(name)}", f"take the writer lease of {name!r}", body
        )

    def renew_lease(
        self, name: str, owner: str, epoch: int, ttl: float, *, bound: str | None = None
    ) -> Lease:
        """The server checks the caller's role on the lease's target and renews only while the
        lease names it, and ``bound`` if given (the target the holder took it for)."""
        body: dict[str, Any] = {"owner": owner, "epoch": epoch, "ttl": ttl}
        if bound is not None:
            body["dataset"] = bound
        return self._lease(
            "POST", f"/v1/remote/leases/{_seg(name)}/renew", f"renew the writer lease of {name!r}", body
        )

    def release_lease(self, name: str, owner: str, epoch: int) -> None:
        what = f"release the writer lease of {name!r}"
        self._api.json(
            "POST",
            f"/v1/remote/leases/{_seg(name)}/release",
            what=what,
            json={"owner": owner, "epoch": epoch},
        )

    def break_lease(self, name: str, dataset: str = "", *, at_once: bool = False) -> Lease | None:
        """A global admin's break (the server answers 403 to others); None if there was no lease."""
        what = f"break the writer lease of {name!r}"
        body = {"dataset": dataset, "at_once": at_once}
        answer = self._api.json("POST", f"/v1/remote/leases/{_seg(name)}/break", what=what, json=body)
        return None if answer is None else self._decode_lease(what, answer)

    def lease(self, name: str) -> Lease | None:
        """The lease as the server shows it to this token (a global admin, or a writer of its
        commit target), None if it has none or this token may not see it. The owner id is
        never sent: an unbroken lease's is ``leases.HIDDEN_OWNER`` here."""
        what = f"read the writer lease of {name!r}"
        try:
            answer = self._api.json("GET", f"/v1/remote/leases/{_seg(name)}", what=what)
        except NotFound as exc:
            if exc.code != NotFound.code:  # not "no such lease": another error (a renamed route)
                raise
            return None
        return self._api.decode(what, _shown_lease, answer)

    def list_leases(self, after: str = "", limit: int = LIST_PAGE) -> list[Lease]:
        """The leases the server shows this token (all to a global admin; else those ``lease``
        shows it), by name, after ``after``. The server reads only what the token may see
        (leasefilter18) and may still answer a short page with a ``next`` (a lease it read
        and then hid: one bound to a dataset created meanwhile): this follows ``next`` until
        ``limit`` leases or the end, so a short answer means the end here too."""
        check_page(limit)
        what, leases = "list the writer leases", []
        while True:
            params = {"after": after, "limit": limit - len(leases)}
            answer = self._api.json("GET", "/v1/remote/leases", what=what, params=params)
            rows, after = self._api.decode(
                what, lambda d: ([_shown_lease(row) for row in d["leases"]], d["next"]), answer
            )
            leases += rows
            if after is None or len(leases) >= limit:
                return leases

    def _lease(self, method: str, path: str, what: str, body: dict[str, Any]) -> Lease:
        return self._decode_lease(what, self._api.json(method, path, what=what, json=body))

    def _decode_lease(self, what: str, answer: Any) -> Lease:
        return self._api.decode(
            what,
            lambda d: Lease(
                d["name"], d["owner"], d["holder"], int(d["epoch"]), float(d["expires"]), d.get("dataset", "")
            ),
            answer,
        )

    def _lease_turn(self, what: str, name: str, change: LeaseChange) -> Lease | None:
        raise AssertionError("the server takes the turn: acquire/renew/release_lease call its routes")

    def put_token(self, token: TokenInfo) -> None:
        raise self._tokens_refused()

    def get_token(self, token_hash: str) -> TokenInfo | None:
        raise self._tokens_refused()

    def delete_token(self, token_hash: str) -> None:
        raise self._tokens_refused()

    def list_tokens(self) -> list[TokenInfo]:
        raise self._tokens_refused()

    # a browser session stands for an API token of the server that checks tokens: its business too
    def instance_id(self) -> str:
        """The remote catalog's address, hashed: a server over it keeps no sign-ins (the remote
        server checks tokens), so this only names the cookies its sign-in form sets."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]

    def put_browser_session(self, session: BrowserSession, now: float) -> None:
        raise self._tokens_refused()

    def get_browser_session(self, id_hash: str) -> BrowserSession | None:
        raise self._tokens_refused()

    def delete_browser_session(self, id_hash: str) -> None:
        raise self._tokens_refused()

    def close(self) -> None:
        self._api.close()


def _fields(dataset: Dataset) -> dict[str, Any]:
    """A dataset's fields an update may set, by name."""
    return {f: getattr(dataset, f) for f in ("description", "source", "owner", "acl", "sources")}


def _seg(value: str) -> str:
    return quote(value, safe="")


def _chunks(body: IO[bytes]) -> Iterator[bytes]:
    while chunk := body.read(_CHUNK):
        yield chunk


@contextmanager
def _spooled(
    header: Mapping[str, Any], changes: Iterable[Change], what: str
) -> Iterator[tuple[IO[bytes], int]]:
    """The NDJSON commit body, written once (to RAM, or a temporary file when large) so every
    retry sends the same bytes; a generator of changes can be consumed only once. A full
    temporary directory is NoSpace naming it (it was a bare ``OSError`` out of the catalog)."""
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as body:

        def put(data: bytes) -> None:
            try:
                body.write(data)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                raise NoSpace(
                    f"{what}: the temporary directory {tempfile.gettempdir()} filled up while the "
                    f"change set was written there to be sent ({exc.strerror}); nothing was committed: "
                    "free space there, or point TMPDIR at a larger file system, and run it again",
                    tmpdir=tempfile.gettempdir(),
                ) from exc

        put(json.dumps(header).encode() + b"\n")
        for change in changes:
            put(json.dumps(_change_json(change)).encode() + b"\n")
        size = body.tell()
        yield body, size


def _change_json(change: Change) -> dict[str, Any]:
    if isinstance(change, Put):
        r = change.record
        record = {"key": r.key, "url": r.url, "etag": r.etag, "size": r.size, "checksum": r.checksum}
        return {"op": "put", "record": record | {"meta": dict(r.meta), "labels": dict(r.labels)}}
    if isinstance(change, Delete):
        return {"op": "delete", "key": change.key}
    if isinstance(change, Patch):
        return {
            "op": "patch",
            "key": change.key,
            "meta": dict(change.meta) if change.meta is not None else None,
            "labels": dict(change.labels) if change.labels is not None else None,
        }
    raise InvalidInput(f"not a change: {type(change).__name__}")


def _dataset(d: Mapping[str, Any]) -> Dataset:
    return Dataset(
        d["name"], d["description"], d["source"], d["owner"], dict(d["acl"]), d["created_at"], d["revision"],
        tuple(d.get("sources") or ()),
    )  # fmt: skip


def _version(v: Mapping[str, Any]) -> Version:
    return Version(
        dataset=v["dataset"],
        seq=v["seq"],
        parent=v["parent"],
        message=v["message"],
        author=v["author"],
        created_at=v["created_at"],
        tags=tuple(v["tags"]),
        record_count=v["record_count"],
        total_bytes=v["total_bytes"],
        added=v["added"],
        removed=v["removed"],
        modified=v["modified"],
        lineage=v["lineage"] or {},
    )


def _record(r: Mapping[str, Any]) -> Record:
    return record_from_row(r["key"], r["url"], r["etag"], r["size"], r["checksum"], r["meta"], r["labels"])


def _diff_entry(e: list[Any]) -> DiffEntry:
    kind, key, old, new = e
    return DiffEntry(
        kind,
        key,
        record_from_row(*old) if old is not None else None,
        record_from_row(*new) if new is not None else None,
    )


__all__ = ["HttpCatalogStore"]


def _files_in_order(rows: list[Any], prefix: str, depth: int, previous: str, width: int) -> bool:
    """Whether ``rows`` (a chunk of a ``/directory`` listing) are all DirFile rows whose keys
    are strings directly in directory ``prefix`` (``depth`` slashes, all the prefix's),
    rising strictly from ``previous``: the per-entry checks of ``list_directory``, done per
    chunk in C (``map``, one ``join``), so a listing's files cost no Python call each. False
    sends the chunk through the per-entry checks, which also name what is wrong."""
    if not rows or set(map(type, rows)) != {list} or set(map(len, rows)) != {width}:
        return False
    keys = list(map(_first, rows))
    if set(map(type, keys)) != {str} or not previous < keys[0]:
        return False
    if "".join(keys).count("/") != depth * len(keys) or not all(map(str.startswith, keys, repeat(prefix))):
        return False
    return all(map(_lt, keys, _islice(keys, 1, None)))


def _shown_lease(d: dict[str, Any]) -> Lease:
    """A lease as ``GET /v1/remote/leases`` shows it: no owner id (``leases.HIDDEN_OWNER``
    stands for an unbroken one's, "" for a broken one, which has none)."""
    owner = "" if d["state"] == "broken" else HIDDEN_OWNER
    return Lease(d["name"], owner, d["holder"], int(d["epoch"]), float(d["expires"]), d["dataset"])
