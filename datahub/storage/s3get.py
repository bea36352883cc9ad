"""A lean S3 GET: SigV4-signed as botocore's ``S3SigV4Auth`` signs it, sent over a urllib3 pool.

Why: a cold epoch reads thousands of small objects, and on a 2-core node the client's CPU
per request decides the throughput. A boto3 ``get_object`` spends most of its ~1-2 ms in
event hooks, parameter validation, endpoint resolution and response parsing that a
ranged GET with If-Match does not need. Here a GET is: one SigV4 signature (``sign_get``,
checked header for header against botocore's signer by the tests), one pooled HTTP request
(bench/storage/get_cpu.py has the figures). Single-part PUTs take the same path
(``LeanGetter.put``, signed with the body's SHA-256: a write-back workspace on RGW puts
every chunk, and boto3's ``put_object`` cost 1.1-1.7 ms of CPU per 100 KB object,
bench/storage/put_cpu.py). Everything else (list, multipart, delete, HEAD) stays on boto3
in ``s3``.

The contract is exactly ``S3Store.read``'s: the same ``Range`` and ``If-Match`` headers,
the same error table (``s3errors.error_for`` on the S3 error code, else the status), and
one attempt per call: the caller's ``RetryPolicy`` decides on retries (urllib3's own
retries and redirects are off). Connection errors and timeouts are
TransientStorageError; only a genuine timeout (the endpoint accepted, or never answered
the connect, and then said nothing in time) carries ``details["timed_out"]``: the origin
stalled. A refused, reset or unresolvable connection is a fast failure and does not, so
nothing upstream mistakes a down-but-answering origin for a stalled one (``timed_out``).

Credentials are botocore's credential object from the caller's session (boto's chain:
config, profile, environment, instance role, assumed role), asked for
``get_frozen_credentials()`` on every request: refreshable temporary credentials rotate
here exactly when they rotate for boto3, and a session token goes out as
``X-Amz-Security-Token``.

The only module that imports urllib3.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
from collections.abc import Callable
from typing import Protocol
from urllib.parse import quote, urlsplit

import urllib3
import urllib3.exceptions as uexc
from botocore.credentials import ReadOnlyCredentials

from datahub.errors import DatahubError, StorageError, TransientStorageError
from datahub.storage.s3errors import check_answer_etag, check_answer_range, error_for, no_credentials

_ERROR_BODY_LIMIT = 64 * 1024
_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a genuine timeout, not a fast failure.

    urllib3 2.x makes ``NewConnectionError`` (connection refused, unreachable, and its
    subclass ``NameResolutionError``) a subclass of ``ConnectTimeoutError``, so an
    ``isinstance(exc, TimeoutError)`` test calls a refused connection a timeout.
    """
    if isinstance(exc, uexc.NewConnectionError):
        return False
    return isinstance(exc, uexc.TimeoutError | TimeoutError)


class CredentialSource(Protocol):
    """What botocore's ``Credentials``/``RefreshableCredentials`` offer: a consistent
    (access key, secret, token) triple, refreshed first when it is about to expire."""

    def get_frozen_credentials(self) -> ReadOnlyCredentials: ...


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()  # a GET has no body; over http S3 signs it
_SIGNING_KEYS: dict[tuple[str, str, str], bytes] = {}  # (secret, day, region) -> SigV4 signing key
_SIGNING_KEYS_MAX = 64


def _signing_key(secret: str, day: str, region: str) -> bytes:
    """SigV4's derived key (four HMACs), the same for every request of one UTC day: kept.
    A dict read and write are atomic under the GIL; a race costs one derivation more."""
    key = _SIGNING_KEYS.get((secret, day, region))
    if key is None:
        key = f"AWS4{secret}".encode()
        for part in (day, region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        if len(_SIGNING_KEYS) >= _SIGNING_KEYS_MAX:
            _SIGNING_KEYS.clear()  # rotated credentials or days gone by: start again
        _SIGNING_KEYS[(secret, day, region)] = key
    return key


def sign_get(
    path: str,
    host: str,
    headers: dict[str, str],
    credentials: ReadOnlyCredentials,
    region: str,
    now: datetime.datetime | None = None,
) -> None:
    """``sign`` of a GET (no body)."""
    sign("GET", path, host, headers, credentials, region, _EMPTY_SHA256, now)


def sign(
    method: str,
    path: str,
    host: str,
    headers: dict[str, str],
    credentials: ReadOnlyCredentials,
    region: str,
    payload_sha256: str,
    now: datetime.datetime | None = None,
) -> None:
    """Add ``Host``, ``X-Amz-*`` and ``Authorization`` to ``headers`` for ``method path`` on
    ``host`` with a body whose SHA-256 is ``payload_sha256``: AWS Signature Version 4,
    exactly as botocore's ``S3SigV4Auth`` signs that request (``tests/storage/test_s3get.py``
    checks it header for header). The server recomputes the body's SHA-256 and refuses a
    body that does not match (``XAmzContentSHA256Mismatch``): a PUT's bytes are checked.

    Why not botocore's signer: it builds a request object, header maps and the signing key
    (four HMACs) for every request, ~80 µs of a cold file's CPU held under the GIL; this is
    one canonical string, one SHA-256 and one HMAC, with the day's key kept.

    ``path`` is signed and sent as is, so it must already be URI-encoded the way S3
    canonicalises it (each byte outside ``A-Za-z0-9-._~/`` percent-encoded once); S3 signs
    it without normalising, and signs the (empty) body's SHA-256 over http and https alike
    for a request without a checksum header.
    """
    when = now or datetime.datetime.now(datetime.UTC)
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    headers["Host"] = host
    headers["X-Amz-Date"] = stamp
    if credentials.token:
        headers["X-Amz-Security-Token"] = credentials.token
    headers["X-Amz-Content-SHA256"] = payload_sha256
    signed = {name.lower(): " ".join(value.split()) for name, value in headers.items()}
    names = sorted(signed)
    signed_names = ";".join(names)
    canonical = "{}\n{}\n\n{}\n{}\n{}".format(
        method, path, "".join(f"{n}:{signed[n]}\n" for n in names), signed_names, payload_sha256
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(
        _signing_key(credentials.secret_key, day, region), to_sign.encode(), hashlib.sha256
    ).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={signed_names}, Signature={signature}"
    )


class Response:
    """The body of a successful GET (200/206), read whole or in pieces; ``close`` releases it."""

    def __init__(self, raw: urllib3.HTTPResponse, where: str) -> None:
        self._raw = raw
        self._where = where
        self.length = int(raw.headers.get("Content-Length", "0"))

    def read(self, n: int | None = None) -> bytes:
        """Up to ``n`` bytes (``None``: the rest); TransientStorageError if the connection breaks."""
        try:
            return self._raw.read(n)
        except (uexc.HTTPError, OSError) as exc:
            raise TransientStorageError(
                f"S3 stream of {self._where} broke: {exc}", **({"timed_out": True} if timed_out(exc) else {})
            ) from exc

    def read_all(self) -> bytes:
        """The whole body, then the connection goes back to the pool."""
        data = self.read()
        if len(data) != self.length:
            self.close()
            raise TransientStorageError(
                f"S3 sent {len(data)} of {self.length} bytes of {self._where}: the connection was cut"
            )
        self._raw.release_conn()
        return data

    def close(self) -> None:
        """Close the connection: unread body bytes must never reach the next request."""
        self._raw.close()
        self._raw.release_conn()


class LeanGetter:
    """Signed GETs (and single-part PUTs) against one S3 endpoint, thread-safe, one pool of
    keep-alive connections."""

    def __init__(
        self,
        endpoint_url: str,
        region: str,
        credentials: Callable[[], CredentialSource | None],
        *,
        path_style: bool,
        connect_timeout: float,
        read_timeout: float,
        max_pool_connections: int,
        ca_bundle: str | None = None,
    ) -> None:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint {endpoint_url!r} is not an http(s) URL")
        self.scheme = parts.scheme
        self.hostname = parts.hostname
        self.port = parts.port
        self.base_path = parts.path.rstrip("/")
        self.path_style = path_style
        self.region = region
        self._credentials = credentials
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        tls = {"cert_reqs": "CERT_REQUIRED", "ca_certs": ca_bundle} if self.scheme == "https" else {}
        self._pools = urllib3.PoolManager(num_pools=64, maxsize=max_pool_connections, block=False, **tls)

    def _target(self, bucket: str, key: str) -> tuple[str, str]:
        """(host, encoded path): virtual-hosted when allowed, else path-style (as boto's 'auto')."""
        quoted = quote(key, safe="/-_.~")
        port = "" if self.port is None else f":{self.port}"
        if not self.path_style and _DNS_BUCKET.match(bucket) and not self.base_path:
            return f"{bucket}.{self.hostname}{port}", f"/{quoted}"
        return f"{self.hostname}{port}", f"{self.base_path}/{bucket}/{quoted}"

    def get(
        self,
        bucket: str,
        key: str,
        byte_range: str | None,
        if_match: str | None,
        budget: float | None = None,
    ) -> Response | None:
        """One GET attempt; None when the range starts past the end (416, an empty slice).

        Errors are datahub errors named after ``s3://bucket/key`` (ObjectChanged for a failed
        If-Match); the caller retries TransientStorageError with its policy. ``budget``
        (seconds left of the caller's overall deadline) caps the connect and read timeouts,
        so a stalled endpoint cannot hold the attempt past the deadline.
        """
        where, credentials, host, path = self._start(bucket, key)
        headers: dict[str, str] = {}
        if byte_range is not None:
            headers["Range"] = byte_range
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        sign_get(path, host, headers, credentials, self.region)
        raw = self._send("GET", host, path, headers, None, budget, bucket, key, where)
        if raw.status in (200, 206):
            try:
                check_answer_etag(raw.headers.get("ETag"), if_match, bucket, key)
                if byte_range is not None:
                    first, last = byte_range.removeprefix("bytes=").split("-", 1)
                    length = int(raw.headers.get("Content-Length", "0"))
                    end = int(last) + 1 if last else None
                    check_answer_range(
                        raw.status, raw.headers.get("Content-Range"), length, int(first), end, bucket, key
                    )
            except DatahubError:
                raw.close()  # its body must never reach the next request on this connection
                raise
            return Response(raw, where)
        error = self._error(raw, bucket, key, if_match)
        if error is None:
            return None
        raise error

    def put(
        self,
        bucket: str,
        key: str,
        payload: bytes | memoryview,
        budget: float | None = None,
        *,
        once: bool = False,
        metadata: dict[str, str] | None = None,
    ) -> str:
        """One single-part PUT attempt of ``payload``; the new object's etag.

        Signed with the body's SHA-256 (as botocore signs a PUT over http): the server checks
        the bytes it got against it. Errors as ``get``'s; the caller retries. ``once``: under
        ``If-None-Match: *``, refused (ObjectChanged, 412) if an object is at the key.
        ``metadata``: user metadata (``x-amz-meta-<name>``, ASCII values), signed with the
        request and stored with the object by the same PUT.
        """
        where, credentials, host, path = self._start(bucket, key)
        headers: dict[str, str] = {"If-None-Match": "*"} if once else {}
        for name, value in (metadata or {}).items():
            headers[f"x-amz-meta-{name}"] = value
        sign("PUT", path, host, headers, credentials, self.region, hashlib.sha256(payload).hexdigest())
        headers["Content-Length"] = str(len(payload))
        raw = self._send("PUT", host, path, headers, payload, budget, bucket, key, where)
        if raw.status == 200:
            etag = raw.headers.get("ETag", "")
            try:
                raw.read()  # an empty body: drained, so the connection goes back to the pool
            except (uexc.HTTPError, OSError):
                raw.close()  # the object is stored (200); only this connection is lost
            finally:
                raw.release_conn()
            if etag:
                return etag.strip('"')
            raise StorageError(f"S3 answered the PUT of {where} without an ETag", bucket=bucket, key=key)
        error = self._error(raw, bucket, key, None)
        raise error or StorageError(
            f"S3 refused the PUT of {where} (HTTP {raw.status})", bucket=bucket, key=key
        )

    def _start(self, bucket: str, key: str) -> tuple[str, ReadOnlyCredentials, str, str]:
        """(``s3://bucket/key`` for messages, this request's credentials, host, path)."""
        source = self._credentials()
        if source is None:
            raise no_credentials(bucket, key)
        host, path = self._target(bucket, key)
        return f"s3://{bucket}/{key}", source.get_frozen_credentials(), host, path

    def _send(
        self,
        method: str,
        host: str,
        path: str,
        headers: dict[str, str],
        body: bytes | memoryview | None,
        budget: float | None,
        bucket: str,
        key: str,
        where: str,
    ) -> urllib3.HTTPResponse:
        """One request on the pool; transport failures as datahub errors (one attempt)."""
        try:
            pool = self._pools.connection_from_host(host.rsplit(":", 1)[0], self.port, self.scheme)
            return pool.urlopen(
                method,
                path,
                body=body,
                headers=headers,
                retries=False,
                redirect=False,
                timeout=self._timeout if budget is None else self._capped(budget),
                preload_content=False,
                decode_content=False,
                assert_same_host=False,
            )
        except uexc.SSLError as exc:
            raise StorageError(
                f"TLS failure talking to S3 for {where}: {exc}", bucket=bucket, key=key
            ) from exc
        except (uexc.HTTPError, OSError) as exc:
            raise TransientStorageError(
                f"S3 endpoint unreachable or too slow for {where}: {exc}",
                bucket=bucket,
                key=key,
                **({"timed_out": True} if timed_out(exc) else {}),
            ) from exc

    def _capped(self, budget: float) -> urllib3.Timeout:
        budget = max(budget, 0.001)
        return urllib3.Timeout(
            connect=min(self._connect_timeout, budget), read=min(self._read_timeout, budget)
        )

    def _error(
        self, raw: urllib3.HTTPResponse, bucket: str, key: str, if_match: str | None
    ) -> DatahubError | None:
        try:
            body = raw.read(_ERROR_BODY_LIMIT)
        except (uexc.HTTPError, OSError):
            body = b""
        finally:
            raw.close()
            raw.release_conn()
        code_match, message_match = _CODE.search(body), _MESSAGE.search(body)
        code = code_match.group(1).decode(errors="replace") if code_match else str(raw.status)
        if code == "InvalidRange" or raw.status == 416:
            return None
        message = message_match.group(1).decode(errors="replace") if message_match else ""
        return error_for(code, raw.status, bucket, key, message=message, expected_etag=if_match)

    def close(self) -> None:
        self._pools.clear()
