"""A CatalogStore over the datahub HTTP API: ``catalog_url = http(s)://host:port``.

Why: nodes (mounts, CSI node plugins, pack workers, LabelX) then need only an API token
(``DATAHUB_API_TOKEN``) and scoped S3 credentials, never the database's. Every call maps onto
``/v1/remote`` (the store contract: exact sequence numbers, NDJSON listings ending with an
``{"end": n}`` line) or the public dataset routes, and every error answer
``{"error": {code, message, details}}`` is raised again as the same ``datahub.errors`` class
a local store raises.

Failures: connection errors, timeouts and 5xx answers are retried a bounded number of times
with exponential backoff inside a total time budget, then raise CatalogUnavailable naming the
URL (never the token). A commit is sent with a commit id (made here when the caller gave
none) from a spooled copy of its body, so a retry after a lost answer returns the version the
first attempt made instead of committing twice. A listing cut short is an error, never a
shorter listing.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any, TypeVar
from urllib.parse import quote

import httpx

from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import (
    Change,
    Dataset,
    Delete,
    DiffEntry,
    Patch,
    Put,
    Record,
    TokenInfo,
    Version,
    record_from_row,
)
from datahub.catalog.store import CatalogStore
from datahub.errors import CatalogUnavailable, DatahubError, InvalidInput, StaleBase

TOKEN_ENV = "DATAHUB_API_TOKEN"
T = TypeVar("T")
_SPOOL_BYTES = 8 * 1024 * 1024  # a commit body beyond this is spooled to a temporary file
_CHUNK = 256 * 1024
_BATCH_KEYS = 10000


def _error_classes() -> dict[str, type[DatahubError]]:
    """code -> class, from the error tree itself (one table; a new error class is mapped by existing)."""
    table: dict[str, type[DatahubError]] = {}
    pending: list[type[DatahubError]] = [DatahubError]
    while pending:
        cls = pending.pop()
        table.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    table["validation_error"] = InvalidInput  # the API's 422 for a request off its schema
    return table


def error_from_answer(status: int, body: Any) -> DatahubError | None:
    """The datahub error an ``{"error": {code, message, details}}`` answer carries, else None."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return None
    cls = _error_classes().get(error["code"], DatahubError)
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    exc = cls(str(error.get("message") or f"the catalog server answered {status}"), **details)
    return exc


class _Retry(Exception):
    """A transient failure worth another attempt (its text names what happened)."""


class HttpCatalogStore(CatalogStore):
    """The CatalogStore of a remote datahub API server (one pooled httpx client)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        attempts: int = 5,
        backoff: float = 0.2,
        budget: float = 60.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.attempts, self.backoff, self.budget = max(1, attempts), backoff, budget
        token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"HttpCatalogStore({self.url!r})"  # never the token

    # --- transport --------------------------------------------------------------------------------
    def _call(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` until it succeeds or the attempts / time budget run out."""
        deadline = time.monotonic() + self.budget
        last = ""
        for n in range(self.attempts):
            try:
                return attempt()
            except _Retry as exc:
                last = str(exc)
            except httpx.TimeoutException as exc:
                last = f"timed out ({type(exc).__name__})"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {_safe(exc)}"
            pause = self.backoff * 2**n
            if n + 1 == self.attempts or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
        raise CatalogUnavailable(
            f"the catalog server {self.url} did not answer {what} after {n + 1} attempt(s): {last}; "
            "check that 'datahub serve' runs there and is reachable",
            url=self.url,
            attempts=n + 1,
        )

    def _check(self, response: httpx.Response, what: str) -> None:
        """Raise the mapped error for an error answer; _Retry for a transient one."""
        if response.status_code < 400:
            return
        response.read()
        try:
            body = response.json()
        except ValueError:
            body = None
        error = error_from_answer(response.status_code, body)
        if response.status_code >= 500 and (error is None or error.code in _TRANSIENT):
            raise _Retry(
                f"HTTP {response.status_code}" + (f" {error.code}: {error.message}" if error else "")
            )
        if error is None:
            raise CatalogUnavailable(
                f"the catalog server {self.url} answered {what} with HTTP {response.status_code} "
                "and no datahub error: is that URL a datahub API server?",
                url=self.url,
                status=response.status_code,
            )
        raise error

    def _json(self, method: str, path: str, *, what: str, **kwargs: Any) -> Any:
        def attempt() -> Any:
            response = self._client.request(method, path, **kwargs)
            self._check(response, what)
            if response.status_code == 204:
                return None
            try:
                return response.json()
            except ValueError:
                raise _Retry(f"answered {what} with something that is not JSON") from None

        return self._call(what, attempt)

    def _lines(self, path: str, *, what: str, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The objects of an NDJSON listing, parsed as they arrive; the end line must come."""

        def attempt() -> httpx.Response:
            request = self._client.build_request("GET", path, params=params)
            response = self._client.send(request, stream=True)
            try:
                self._check(response, what)
            except BaseException:
                response.close()
                raise
            return response

        response = self._call(what, attempt)
        count = 0
        try:
            for line in response.iter_lines():
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise self._garbage(what, "a line that is not JSON") from None
                if not isinstance(obj, dict):
                    raise self._garbage(what, "a line that is not a JSON object")
                if "end" in obj and len(obj) == 1:
                    if obj["end"] != count:
                        raise self._garbage(what, f"{count} items but an end line saying {obj['end']}")
                    return
                count += 1
                yield obj
        except httpx.HTTPError as exc:
            raise CatalogUnavailable(
                f"the catalog server {self.url} cut {what} short after {count} item(s): "
                f"{type(exc).__name__}; nothing after that point was read, retry the call",
                url=self.url,
            ) from None
        finally:
            response.close()
        raise CatalogUnavailable(
            f"the catalog server {self.url} ended {what} after {count} item(s) without its end line: "
            "the listing is incomplete; retry the call",
            url=self.url,
        )

    def _garbage(self, what: str, why: str) -> CatalogUnavailable:
        return CatalogUnavailable(
            f"the catalog server {self.url} answered {what} with {why}: is that URL a datahub API server?",
            url=self.url,
        )

    def _decode(self, what: str, convert: Callable[[Any], T], obj: Any) -> T:
        try:
            return convert(obj)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise self._garbage(what, "an object of the wrong shape") from None

    # --- datasets -------------------------------------------------------------------------------
    def create_dataset(self, dataset: Dataset) -> Dataset:
        body = {
            "name": dataset.name,
            "description": dataset.description,
            "source": dataset.source,
            "owner": dataset.owner,
            "acl": dict(dataset.acl),
        }
        what = f"create dataset {dataset.name!r}"
        return self._decode(what, _dataset, self._json("POST", "/v1/remote/datasets", what=what, json=body))

    def get_dataset(self, name: str) -> Dataset:
        what = f"get dataset {name!r}"
        return self._decode(what, _dataset, self._json("GET", f"/v1/datasets/{_seg(name)}", what=what))

    def list_datasets(self) -> Iterator[Dataset]:
        what = "list datasets"
        answer = self._json("GET", "/v1/datasets", what=what)
        if not isinstance(answer, list):
            raise self._garbage(what, "something that is not a list")
        return iter([self._decode(what, _dataset, d) for d in answer])

    def update_dataset(
        self, name: str, fields: Mapping[str, Any], *, expected_revision: int | None = None
    ) -> Dataset:
        what = f"update dataset {name!r}"
        headers = {"If-Match": f'"r{expected_revision}"'} if expected_revision is not None else {}
        body = {k: (dict(v) if k == "acl" else v) for k, v in fields.items()}
        answer = self._json("PATCH", f"/v1/datasets/{_seg(name)}", what=what, json=body, headers=headers)
        return self._decode(what, _dataset, answer)

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
        with _spooled(header, changes) as (body, size):

            def attempt() -> Any:
                body.seek(0)
                response = self._client.post(
                    f"/v1/remote/datasets/{_seg(dataset)}/commits",
                    content=_chunks(body),
                    headers={"Content-Type": "application/x-ndjson", "Content-Length": str(size)},
                )
                self._check(response, what)
                try:
                    return response.json()
                except ValueError:
                    raise _Retry(f"answered {what} with something that is not JSON") from None

            return self._decode(what, _version, self._call(what, attempt))

    def _check_base(self, dataset: str, base: int) -> None:
        """StaleBase before a single change is read, as a local store refuses a stale base: the
        Catalog may then retry a commit "on the head" with the new head. Skipped when the caller
        sent a commit id: its retry must reach the server, which answers the version that id made."""
        head = self.head(dataset)
        if head != base:
            raise StaleBase(
                f"cannot commit to dataset {dataset!r} on version {base}: the head is now version {head}; "
                "rebase your changes on the head and retry",
                dataset=dataset,
                base=base,
                head=head,
            )

    def head(self, dataset: str) -> int:
        what = f"head of dataset {dataset!r}"
        answer = self._json("GET", f"/v1/remote/datasets/{_seg(dataset)}/head", what=what)
        return self._decode(what, lambda a: int(a["head"]), answer)

    def get_version(self, dataset: str, seq: int) -> Version:
        what = f"version {seq} of dataset {dataset!r}"
        answer = self._json("GET", f"/v1/remote/datasets/{_seg(dataset)}/versions/{int(seq)}", what=what)
        return self._decode(what, _version, answer)

    def list_versions(self, dataset: str) -> Iterator[Version]:
        what = f"the versions of dataset {dataset!r}"
        for obj in self._lines(f"/v1/remote/datasets/{_seg(dataset)}/versions", what=what, params={}):
            yield self._decode(what, _version, obj)

    def set_tag(self, dataset: str, tag: str, seq: int) -> None:
        what = f"tag {tag!r} of dataset {dataset!r}"
        path = f"/v1/remote/datasets/{_seg(dataset)}/tags/{_seg(tag)}"
        self._json("PUT", path, what=what, json={"seq": seq})

    def delete_tag(self, dataset: str, tag: str) -> None:
        what = f"delete tag {tag!r} of dataset {dataset!r}"
        self._json("DELETE", f"/v1/datasets/{_seg(dataset)}/tags/{_seg(tag)}", what=what)

    def tag_target(self, dataset: str, tag: str) -> int:
        what = f"tag {tag!r} of dataset {dataset!r}"
        answer = self._json("GET", f"/v1/remote/datasets/{_seg(dataset)}/tags/{_seg(tag)}", what=what)
        return self._decode(what, lambda a: int(a["seq"]), answer)

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
        what = f"the records of version {seq} of dataset {dataset!r}"
        params: dict[str, Any] = {"seq": seq}
        if prefix:
            params["prefix"] = prefix
        if start_after:
            params["start_after"] = start_after
        if limit is not None:
            params["limit"] = limit
        if where is not None:
            params["filter"] = str(where)
        for obj in self._lines(f"/v1/remote/datasets/{_seg(dataset)}/records", what=what, params=params):
            yield self._decode(what, _record, obj)

    def get_record(self, dataset: str, seq: int, key: str) -> Record:
        what = f"record {key!r} of version {seq} of dataset {dataset!r}"
        path = f"/v1/datasets/{_seg(dataset)}/versions/{int(seq)}/records/{quote(key, safe='/')}"
        return self._decode(what, _record, self._json("GET", path, what=what))

    def get_records(self, dataset: str, seq: int, keys: list[str]) -> dict[str, Record]:
        what = f"records of version {seq} of dataset {dataset!r}"
        found: dict[str, Record] = {}
        for start in range(0, len(keys), _BATCH_KEYS):
            body = {"seq": seq, "keys": keys[start : start + _BATCH_KEYS]}
            answer = self._json(
                "POST", f"/v1/remote/datasets/{_seg(dataset)}/records/get", what=what, json=body
            )
            if not isinstance(answer, list):
                raise self._garbage(what, "something that is not a list")
            for obj in answer:
                record = self._decode(what, _record, obj)
                found[record.key] = record
        return found

    def diff(self, dataset: str, a: int, b: int, *, prefix: str = "") -> Iterator[DiffEntry]:
        what = f"the diff of versions {a}..{b} of dataset {dataset!r}"
        params: dict[str, Any] = {"a": a, "b": b} | ({"prefix": prefix} if prefix else {})
        for obj in self._lines(f"/v1/remote/datasets/{_seg(dataset)}/diff", what=what, params=params):
            yield self._decode(what, _diff_entry, obj)

    # --- API tokens: the server's business --------------------------------------------------------
    def _tokens_refused(self) -> InvalidInput:
        return InvalidInput(
            f"API tokens cannot be managed through the remote catalog {self.url}: run "
            "'datahub token create/revoke' on the API server (against its own catalog URL)",
            url=self.url,
        )

    def put_token(self, token: TokenInfo) -> None:
        raise self._tokens_refused()

    def get_token(self, token_hash: str) -> TokenInfo | None:
        raise self._tokens_refused()

    def delete_token(self, token_hash: str) -> None:
        raise self._tokens_refused()

    def close(self) -> None:
        self._client.close()


_TRANSIENT = {"internal", "busy", "storage_unavailable", "catalog_unavailable"}


def _safe(exc: BaseException) -> str:
    """A transport error's text (httpx's never carries request headers, so never the token)."""
    return str(exc) or type(exc).__name__


def _seg(value: str) -> str:
    return quote(value, safe="")


def _chunks(body: IO[bytes]) -> Iterator[bytes]:
    while chunk := body.read(_CHUNK):
        yield chunk


@contextmanager
def _spooled(header: Mapping[str, Any], changes: Iterable[Change]) -> Iterator[tuple[IO[bytes], int]]:
    """The NDJSON commit body, written once (to RAM, or a temporary file when large) so every
    retry sends the same bytes; a generator of changes can be consumed only once."""
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as body:
        body.write(json.dumps(header).encode() + b"\n")
        for change in changes:
            body.write(json.dumps(_change_json(change)).encode() + b"\n")
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
        d["name"], d["description"], d["source"], d["owner"], dict(d["acl"]), d["created_at"], d["revision"]
    )


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


def _diff_entry(e: Mapping[str, Any]) -> DiffEntry:
    old, new = e["old"], e["new"]
    return DiffEntry(
        e["kind"],
        e["key"],
        _record(old) if old is not None else None,
        _record(new) if new is not None else None,
    )


__all__ = ["TOKEN_ENV", "HttpCatalogStore", "error_from_answer"]
