"""S3-compatible object stores (AWS S3, Ceph RGW, MinIO …) through boto3.

The only module that imports boto3 (botocore also signs the lean GET in ``s3get``).
Every SDK call goes through ``S3Store._call``, which translates SDK errors once (table in
``s3errors``) and retries transient ones once (``retry.RetryPolicy``); boto's own retry layer is off
(``total_max_attempts=1``) so attempts never multiply. One deadline, ``s3.total_timeout``,
bounds a call across all its attempts and backoffs; the GET's connect/read timeouts are
capped to what is left of it, so a stalled endpoint fails a read within the budget.

Writes (single PUT, streamed multipart upload, abort on failure) live in ``s3put``,
mixed into ``S3Store``; the lean GET in ``s3get``; the error table in ``s3errors``.

Why boto3 and not s3fs: the calls here are synchronous, per-request and need exact
control of ``Range``/``IfMatch``, pagination and multipart part sizes; s3fs adds an
asyncio loop thread and its own retry and caching layers we would have to disable.

Credentials: ``s3.access_key_id``/``secret_access_key`` from the config if set, else the
named ``s3.profile``, else boto's default chain (environment, shared files, instance role).
Checksums: boto's default CRC trailers are limited to operations that require them, since
several S3-compatible servers reject the trailer framing.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import boto3
import botocore.exceptions as bexc
import botocore.loaders
import botocore.session
from botocore.config import Config as BotoConfig
from botocore.httpsession import DEFAULT_CA_BUNDLE
from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url, validate_region_name

from datahub.config import S3Config
from datahub.errors import (
    DatahubError,
    InvalidInput,
    ObjectChanged,
    ObjectNotFound,
    StorageError,
    TransientStorageError,
)
from datahub.procs import PerProcess
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.keys import check_foreign_key, check_range
from datahub.storage.retry import RetryPolicy, remaining
from datahub.storage.s3errors import (
    check_answer_etag,
    check_answer_range,
    error_for,
    no_credentials,
    unquote_etag,
)
from datahub.storage.s3get import CredentialSource, LeanGetter
from datahub.storage.s3put import MIN_PART, S3Writes, read_exactly
from datahub.storage.urls import encode_key

log = logging.getLogger(__name__)


class _NoDuplicatePaths(list):
    """Search paths that ignore an append of a path they hold: every boto3 Session appends
    boto3's data directory to its loader, and the shared loader must not grow with each."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


_LOADER = botocore.loaders.create_loader()
_LOADER._search_paths = _NoDuplicatePaths(_LOADER.search_paths)


def _botocore_session() -> botocore.session.Session:
    """A fresh botocore session (own credentials and config) on the process's one data loader.

    Why: the loader caches the SDK's parsed JSON models (S3's service model, endpoints,
    rulesets), which never change; a loader per session parsed them again for every
    connection, ~0.2 s of CPU each time a StoreRegistry opened S3 (measured: a store's
    open went from 0.33 s to 0.06 s).
    """
    session = botocore.session.get_session()
    session.register_component("data_loader", _LOADER)
    return session


T = TypeVar("T")

_NETWORK_ERRORS = (
    bexc.ConnectionError,  # EndpointConnectionError, ConnectTimeoutError …
    bexc.HTTPClientError,  # ConnectionClosedError, ReadTimeoutError, ResponseStreamingError …
    bexc.IncompleteReadError,
)


class _Parts:
    """One process's boto3 session, client and lean GET pool (``S3Connection``).

    The client is made by ``make_client`` on first use (``client``). Why: making the first
    S3 client of a process parses the SDK's S3 model and endpoint rules, ~0.1 CPU-s, a
    quarter of a mount daemon's start, and a process whose GETs and single PUTs all take the
    lean path (a read-only mount, ``datahub cat``) never needs it."""

    def __init__(self, session: Any, make_client: Callable[[], Any]) -> None:
        self.session = session
        self._make_client = make_client
        self._client: Any = None
        self._client_lock = threading.Lock()
        self.credentials: Any = None  # botocore's, looked up on first use
        self.getter: LeanGetter | None = None

    @property
    def client(self) -> Any:
        """The boto3 client, made now if this is its first use (one per process, under a lock)."""
        client = self._client
        if client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = self._make_client()
                client = self._client
        return client

    def close(self) -> None:
        """Close the client's pools, if it was ever made."""
        if self._client is not None:
            self._client.close()


class S3Connection:
    """One pooled, thread-safe boto3 client (and the lean GET beside it); a StoreRegistry
    shares it between buckets.

    ``lean_get=False`` sends GETs and single-part PUTs through boto3 too (the benchmarks'
    same-run baseline).

    The session, client, credentials and pools are per process (``procs.PerProcess``): a
    forked child (a DataLoader worker) using a store its parent opened makes its own on first
    use and never touches the parent's. Why: the pooled keep-alive sockets were shared, so a
    parent and a child reading at once sent both requests down one socket and each read the
    other's answer: the parent got the child's object with status 200 (wrong bytes;
    tests/storage/test_fork27.py).
    """

    def __init__(self, config: S3Config, *, lean_get: bool = True) -> None:
        self._config, self._lean_get = config, lean_get
        self._parts: PerProcess[_Parts] = PerProcess(self._open)
        self._parts.get()  # a configuration error is the opener's, now

    def _open(self) -> _Parts:
        """This process's session (and the lean GET), with every check of the configuration
        the SDK's client would make; the client itself is made on first use (``_Parts``),
        except without an endpoint URL, where the lean GET needs the endpoint the client's
        rules resolve (AWS)."""
        config = self._config
        try:
            if config.access_key_id:
                session = boto3.session.Session(
                    aws_access_key_id=config.access_key_id,
                    aws_secret_access_key=config.secret_access_key,
                    region_name=config.region,
                    botocore_session=_botocore_session(),
                )
            else:
                session = boto3.session.Session(
                    profile_name=config.profile,
                    region_name=config.region,
                    botocore_session=_botocore_session(),
                )
            boto_config = BotoConfig(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=config.connect_timeout,
                read_timeout=config.read_timeout,
                max_pool_connections=config.max_pool_connections,
                s3={"addressing_style": "path" if config.path_style else "auto"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            endpoint = config.endpoint_url
            if endpoint:
                # what the client checks when it is made, so a bad value is the opener's error
                if not is_valid_endpoint_url(endpoint) and not is_valid_ipv6_endpoint_url(endpoint):
                    raise ValueError(f"Invalid endpoint: {endpoint}")
                if session.region_name is not None:
                    validate_region_name(session.region_name)
        except bexc.ProfileNotFound as exc:
            raise InvalidInput(
                f"S3 profile {config.profile!r} not found: set s3.profile to a profile in ~/.aws/config "
                "or give s3.access_key_id/secret_access_key"
            ) from exc
        except (bexc.BotoCoreError, ValueError) as exc:
            raise InvalidInput(f"invalid S3 configuration (endpoint {config.endpoint_url!r}): {exc}") from exc

        def make_client() -> Any:
            try:
                return session.client("s3", endpoint_url=endpoint, config=boto_config)
            except (bexc.BotoCoreError, ValueError) as exc:
                raise InvalidInput(f"invalid S3 configuration (endpoint {endpoint!r}): {exc}") from exc

        parts = _Parts(session, make_client)
        if not endpoint:
            parts.client  # noqa: B018 - made now: the lean GET's endpoint is the client's (below)
        if self._lean_get:
            parts.getter = self._lean_getter(config, parts)
        return parts

    @property
    def client(self) -> Any:
        """This process's boto3 client."""
        return self._parts.get().client

    @property
    def endpoint(self) -> str:
        """The endpoint URL the client sends to: the configured one (what the SDK's client
        reports for it), else the client's (no client is made for it when one is set)."""
        return self._config.endpoint_url or self.client.meta.endpoint_url

    @property
    def _session(self) -> Any:
        """This process's boto3 session."""
        return self._parts.get().session

    @property
    def getter(self) -> LeanGetter | None:
        """This process's lean GET, or None (GETs go through boto3)."""
        return self._parts.get().getter

    def _lean_getter(self, config: S3Config, parts: _Parts) -> LeanGetter | None:
        """The signed urllib3 GET, unless boto has to do it: an HTTP proxy in the environment
        (the lean path does not speak to proxies) or an endpoint it cannot parse."""
        # with an endpoint URL, the client's endpoint and region are the configured ones (the
        # region "us-east-1" when none is set): the client need not exist for the lean GET
        endpoint = config.endpoint_url or parts.client.meta.endpoint_url
        region = parts.session.region_name if config.endpoint_url else parts.client.meta.region_name
        host = urlsplit(endpoint).hostname or ""
        proxies = urllib.request.getproxies()
        if urlsplit(endpoint).scheme in proxies and not urllib.request.proxy_bypass(host):
            log.info("S3 GETs and PUTs go through boto3: a proxy is configured for %s", endpoint)
            return None
        try:
            return LeanGetter(
                endpoint,
                region or "us-east-1",
                self.credentials,
                path_style=config.path_style,
                connect_timeout=config.connect_timeout,
                read_timeout=config.read_timeout,
                max_pool_connections=config.max_pool_connections,
                ca_bundle=self._ca_bundle(parts.session, endpoint),
            )
        except ValueError as exc:
            log.info("S3 GETs and PUTs go through boto3: %s", exc)
            return None

    @staticmethod
    def _ca_bundle(session: Any, endpoint: str) -> str | None:
        """The CA bundle boto would use (AWS_CA_BUNDLE, the profile's ca_bundle, certifi's)."""
        if not endpoint.startswith("https:"):
            return None
        core = session._session  # boto3 does not re-export botocore's config lookup
        return core.get_config_variable("ca_bundle") or DEFAULT_CA_BUNDLE

    def credentials(self) -> CredentialSource | None:
        """Boto's credentials for this process's session (the client's own chain), or None.

        The object is botocore's, refreshable ones included: the lean GET asks it for
        ``get_frozen_credentials()`` per request, so rotated temporary keys are used as soon
        as botocore has refreshed them.
        """
        parts = self._parts.get()
        creds = parts.credentials
        if creds is None:
            creds = parts.credentials = parts.session.get_credentials()
        return creds

    def close(self) -> None:
        """Close this process's pools; a parent's, in a forked child, are left alone."""
        parts = self._parts.drop()
        if parts is None:
            return
        if parts.getter is not None:
            parts.getter.close()
        parts.close()


class _Body(Protocol):
    """An open GET response body, from either HTTP path."""

    length: int  # Content-Length: the bytes this response promises

    def read(self, n: int | None = None) -> bytes: ...
    def read_all(self) -> bytes: ...
    def close(self) -> None: ...


class _BotoBody:
    """A boto3 StreamingBody with the lean path's interface; breaks are TransientStorageError."""

    def __init__(self, body: Any, length: int, where: str) -> None:
        self._body, self.length, self._where = body, length, where

    def read(self, n: int | None = None) -> bytes:
        try:
            return self._body.read(n)
        except bexc.BotoCoreError as exc:  # ReadTimeout, ResponseStreamingError, IncompleteRead
            stalled = {"timed_out": True} if isinstance(exc, bexc.ReadTimeoutError) else {}
            raise TransientStorageError(f"S3 stream of {self._where} broke: {exc}", **stalled) from exc

    def read_all(self) -> bytes:
        try:
            return self.read()  # botocore checks the Content-Length on a full read
        finally:
            self._body.close()

    def close(self) -> None:
        self._body.close()


def _translate(exc: Exception, bucket: str, key: str | None, expected_etag: str | None) -> DatahubError:
    """SDK exception -> datahub error; the only place botocore errors are interpreted."""
    if isinstance(exc, bexc.ClientError):
        err = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        code = str(err.get("Code") or status)
        return error_for(
            code, status, bucket, key, message=str(err.get("Message") or ""), expected_etag=expected_etag
        )
    where = f"s3://{bucket}/{key or ''}"
    if isinstance(exc, bexc.NoCredentialsError | bexc.PartialCredentialsError):
        return no_credentials(bucket, key)
    if isinstance(exc, _NETWORK_ERRORS):
        # Only a genuine timeout is a stalled origin (``timed_out``, as the lean GET says it);
        # EndpointConnectionError (refused, unreachable) is a fast failure.
        stalled = isinstance(exc, bexc.ConnectTimeoutError | bexc.ReadTimeoutError)
        return TransientStorageError(
            f"S3 endpoint unreachable or too slow for {where}: {exc}",
            bucket=bucket,
            key=key,
            **({"timed_out": True} if stalled else {}),
        )
    return StorageError(f"S3 request for {where} failed: {exc}", bucket=bucket, key=key)


class S3Store(S3Writes, ObjectStore):
    """A bucket, optionally under a prefix; keys are relative to ``s3://bucket/prefix/``."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        config: S3Config,
        *,
        connection: S3Connection | None = None,
        retry: RetryPolicy | None = None,
        page_size: int = 1000,
        clock: Callable[[], float] = time.time,
        lean_get: bool = True,
    ) -> None:
        if not bucket:
            raise InvalidInput("an S3 store needs a bucket name: s3://bucket[/prefix]")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.root_url = f"s3://{bucket}" + (f"/{encode_key(self.prefix.rstrip('/'))}" if self.prefix else "")
        self._owns_connection = connection is None
        self._conn = connection or S3Connection(config, lean_get=lean_get)
        self.retry = retry or RetryPolicy(config.max_attempts, budget=config.total_timeout or None)
        self.page_size = max(1, min(1000, page_size))
        self.multipart_threshold = config.multipart_threshold
        self.multipart_chunk = max(MIN_PART, config.multipart_chunk)
        self.multipart_concurrency = max(1, config.multipart_concurrency)
        self._clock = clock

    @property
    def _client(self) -> Any:
        """The connection's boto3 client of this process (``S3Connection``)."""
        return self._conn.client

    def identity(self) -> str:
        """The endpoint besides the bucket's URL: two S3 services may each have a bucket of the name."""
        return f"{self._conn.endpoint} {self.root_url}"

    # --- the boundary: translate once, retry once ---------------------------------------------
    def _call(self, full_key: str | None, fn: Callable[[], T], expected_etag: str | None = None) -> T:
        """Run one SDK call: errors name the bucket and the full key (prefix included)."""
        key = full_key

        def attempt() -> T:
            try:
                return fn()
            except (bexc.BotoCoreError, bexc.ClientError) as exc:
                raise _translate(exc, self.bucket, key, expected_etag) from exc

        def on_retry(n: int, exc: TransientStorageError) -> None:
            log.info("retrying S3 call for s3://%s/%s after: %s", self.bucket, key or "", exc.message)

        try:
            return self.retry.call(attempt, on_retry)
        except TransientStorageError as exc:
            log.warning("S3 call for s3://%s/%s failed: %s", self.bucket, key or "", exc.message)
            raise

    def _full(self, key: str) -> str:
        check_foreign_key(key)
        return self.prefix + key

    def _info(self, key: str, size: int, etag: str, modified: Any) -> ObjectInfo:
        return ObjectInfo(key, int(size), unquote_etag(etag), modified.timestamp())

    def _list_params(self, prefix: str, start_after: str, **extra: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self.prefix + prefix,
            "MaxKeys": self.page_size,
            **extra,
        }
        if start_after:
            params["StartAfter"] = self.prefix + start_after
        return params

    # --- the five hooks ------------------------------------------------------------------------
    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        """ListObjectsV2, one page (``page_size`` keys) at a time, each page retried alone."""
        params = self._list_params(prefix, start_after)
        cut = len(self.prefix)
        while True:
            page = self._call(
                params["Prefix"] or None, lambda p=dict(params): self._client.list_objects_v2(**p)
            )
            for item in page.get("Contents", ()):
                yield self._info(item["Key"][cut:], item["Size"], item["ETag"], item["LastModified"])
            token = self._next_page(page, params["Prefix"])
            if token is None:
                return
            params["ContinuationToken"] = token

    def list_dir(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo | str]:
        """ListObjectsV2 with the ``/`` delimiter: a page holds up to ``page_size`` objects and
        subdirectories together, merged here in key order."""
        params = self._list_params(prefix, start_after, Delimiter="/")
        cut = len(self.prefix)
        while True:
            page = self._call(
                params["Prefix"] or None, lambda p=dict(params): self._client.list_objects_v2(**p)
            )
            items: list[tuple[str, ObjectInfo | str]] = [
                (i["Key"], self._info(i["Key"][cut:], i["Size"], i["ETag"], i["LastModified"]))
                for i in page.get("Contents", ())
            ]
            items += [(p["Prefix"], p["Prefix"][cut:]) for p in page.get("CommonPrefixes", ())]
            items.sort(key=lambda kv: kv[0])
            for _key, item in items:
                yield item
            token = self._next_page(page, params["Prefix"])
            if token is None:
                return
            params["ContinuationToken"] = token

    def _next_page(self, page: dict[str, Any], prefix: str) -> str | None:
        """The continuation token of a LIST page, None after the last page.

        Why an error for a truncated page without a token: the listing ended there, and an
        import committed a version missing every key after that page (and a re-import
        removed them from the head); a listing either reaches its end or fails (review36)."""
        if not page.get("IsTruncated"):
            return None
        token = page.get("NextContinuationToken")
        if not token:
            raise StorageError(
                f"S3 LIST of s3://{self.bucket}/{prefix} returned a truncated page without a "
                "continuation token, so the rest of the listing cannot be read; nothing listed "
                "from it is used. Check the S3-compatible server (ListObjectsV2 support) and retry",
                bucket=self.bucket,
                key=prefix,
            )
        return str(token)

    def stat(self, key: str) -> ObjectInfo:
        full = self._full(key)
        head = self._call(full, lambda: self._client.head_object(Bucket=self.bucket, Key=full))
        return self._info(key, head["ContentLength"], head["ETag"], head["LastModified"])

    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        check_range(key, start, end)
        full = self._full(key)
        if end == start:
            if etag is not None:
                self._checkunquote_etag(key, etag)
            return b""

        def get() -> bytes | None:
            body = self._get(full, start, end, etag)
            return None if body is None else body.read_all()

        try:
            data = self._call(full, get, expected_etag=etag)
        except ObjectChanged as exc:
            self._add_currentunquote_etag(exc, key)
            raise
        if data is None:  # start at or past the end: no bytes, like a slice
            if etag is not None:
                self._checkunquote_etag(key, etag)
            return b""
        return data

    def read_chunks(
        self,
        key: str,
        start: int = 0,
        end: int | None = None,
        etag: str | None = None,
        chunk_size: int = 1 << 20,
    ) -> Iterator[bytes]:
        """One ranged GET (If-Match with ``etag``), its body read ``chunk_size`` bytes at a time.

        Opening the response and reading the first chunk is one attempt of the retry policy,
        so a transient failure before any byte reached the caller is retried. Once bytes
        were yielded a retry would silently restart the stream, so a failure then raises
        (``_cut_short``): ObjectChanged if the object was replaced meanwhile (RGW may end
        the body of an overwritten object early), else TransientStorageError; the caller
        resumes from the bytes it has. Closing the generator early closes the connection
        (it is not returned to the pool with unread bytes in it).
        """
        check_range(key, start, end)
        if chunk_size < 1:
            raise InvalidInput(f"read_chunks of {key!r}: chunk_size must be positive, not {chunk_size}")
        full = self._full(key)
        if end == start:
            if etag is not None:
                self._checkunquote_etag(key, etag)
            return

        def open_stream() -> tuple[_Body, bytes] | None:
            body = self._get(full, start, end, etag)
            if body is None:
                return None
            want = min(chunk_size, body.length)
            try:
                first = read_exactly(body, want)
            except BaseException:
                body.close()
                raise
            if len(first) < want:
                body.close()  # ended early and nothing was yielded yet: a retry may start over
                raise self._cut_short(key, None, start, len(first), body.length, None)
            return body, first

        try:
            opened = self._call(full, open_stream, expected_etag=etag)
        except ObjectChanged as exc:
            self._add_currentunquote_etag(exc, key)
            raise
        if opened is None:
            if etag is not None:
                self._checkunquote_etag(key, etag)
            return
        body, chunk = opened
        length, got = body.length, 0
        try:
            while chunk:
                got += len(chunk)
                yield chunk
                if got >= length:
                    return
                try:
                    chunk = read_exactly(body, min(chunk_size, length - got))
                except TransientStorageError as exc:
                    raise self._cut_short(key, etag, start, got, length, exc) from exc
            if got < length:
                raise self._cut_short(key, etag, start, got, length, None)
        finally:
            body.close()

    def _get(self, full: str, start: int, end: int | None, etag: str | None) -> _Body | None:
        """One GET attempt: the open body, or None when ``start`` is at or past the end.

        The lean signed GET (``s3get``) when the connection has one, else boto3; both raise
        the same datahub errors (boto's through ``_call``).
        """
        byte_range = None
        if start or end is not None:
            byte_range = f"bytes={start}-" + ("" if end is None else str(end - 1))
        if self._conn.getter is not None:
            return self._conn.getter.get(self.bucket, full, byte_range, etag, budget=remaining())
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
        if byte_range is not None:
            params["Range"] = byte_range
        if etag is not None:
            params["IfMatch"] = f'"{etag}"'
        try:
            resp = self._client.get_object(**params)
        except bexc.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return None
            raise
        try:
            check_answer_etag(resp.get("ETag"), etag, self.bucket, full)
            if byte_range is not None:
                status = resp["ResponseMetadata"]["HTTPStatusCode"]
                length = int(resp["ContentLength"])
                check_answer_range(status, resp.get("ContentRange"), length, start, end, self.bucket, full)
        except DatahubError:
            resp["Body"].close()
            raise
        return _BotoBody(resp["Body"], int(resp["ContentLength"]), f"s3://{self.bucket}/{full}")

    def _cut_short(
        self, key: str, etag: str | None, start: int, got: int, length: int, cause: Exception | None
    ) -> DatahubError:
        """The error for a body that ended (or broke) after ``got`` of ``length`` bytes."""
        if etag is not None:
            try:
                head = self._client.head_object(Bucket=self.bucket, Key=self._full(key))
            except (bexc.BotoCoreError, bexc.ClientError):
                head = None
            if head is not None and unquote_etag(head["ETag"]) != etag:
                return error_for(
                    "PreconditionFailed",
                    412,
                    self.bucket,
                    self._full(key),
                    expected_etag=etag,
                    actual_etag=unquote_etag(head["ETag"]),
                )
        why = f": {cause}" if cause is not None else ""
        return TransientStorageError(
            f"the stream of s3://{self.bucket}/{self._full(key)} broke after {got} of {length} bytes"
            f"{why}; read again from byte {start + got}",
            bucket=self.bucket,
            key=self._full(key),
            received=got,
            expected_bytes=length,
        )

    def _checkunquote_etag(self, key: str, etag: str) -> None:
        current = self.stat(key).etag
        if current != etag:
            raise error_for(
                "PreconditionFailed",
                412,
                self.bucket,
                self._full(key),
                expected_etag=etag,
                actual_etag=current,
            )

    def _add_currentunquote_etag(self, exc: ObjectChanged, key: str) -> None:
        """Best effort: name the object's current etag in the error (one HEAD, no retries)."""
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=self._full(key))
        except (bexc.BotoCoreError, bexc.ClientError):
            return
        current = unquote_etag(head["ETag"])
        exc.details["actual"] = current
        exc.message = f"{exc.message}, now {current}"
        exc.args = (exc.message,)

    def delete(self, key: str) -> None:
        full = self._full(key)
        try:
            self._call(full, lambda: self._client.delete_object(Bucket=self.bucket, Key=full))
        except ObjectNotFound as exc:
            if exc.details.get("s3_code") == "NoSuchBucket":
                raise  # a missing bucket is a configuration error worth reporting
            # some servers answer 404 NoSuchKey for an absent key: deleting is idempotent

    def close(self) -> None:
        if self._owns_connection:
            self._conn.close()
