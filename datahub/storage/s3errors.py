"""S3 error codes -> datahub errors, in one table (no SDK import: s3.py extracts code/status).

Lookup order: the S3 error code first (``NoSuchKey``, ``SlowDown`` …), then the HTTP
status (HEAD responses carry no body, so only ``404``/``403``/``412`` arrive there).
"""

from __future__ import annotations

from datahub.errors import (
    AccessDenied,
    DatahubError,
    InvalidInput,
    ObjectChanged,
    ObjectNotFound,
    StorageError,
    TransientStorageError,
)

_NOT_FOUND = {"NoSuchKey", "NoSuchBucket", "NotFound", "404"}
_DENIED = {
    "AccessDenied",
    "403",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AllAccessDisabled",
    "AccountProblem",
    "ExpiredToken",
    "InvalidToken",
}
_CHANGED = {"PreconditionFailed", "412"}
_TRANSIENT = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "TooManyRequests",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "RequestTimeTooSkewed",  # clock drift on a node: a later attempt may be signed afresh
    "BadGateway",
    "Timeout",
}
_INVALID = {"InvalidBucketName", "KeyTooLongError", "InvalidArgument", "EntityTooSmall", "EntityTooLarge"}


def is_transient_status(status: int) -> bool:
    return status == 429 or status >= 500


def error_for(
    code: str,
    status: int,
    bucket: str,
    key: str | None,
    *,
    message: str = "",
    expected_etag: str | None = None,
    actual_etag: str | None = None,
) -> DatahubError:
    """The datahub error for one failed S3 call; messages name the bucket and key."""
    where = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
    details = {"bucket": bucket, "key": key, "s3_code": code, "status": status}
    detail = f" ({code}: {message})" if message else f" ({code})"
    if code in _NOT_FOUND or (status == 404 and code not in _DENIED):
        what = "bucket" if code == "NoSuchBucket" or not key else "object"
        hint = "check the bucket name and endpoint" if what == "bucket" else "it was deleted or never existed"
        name = f"bucket {bucket!r}" if what == "bucket" else f"object {key!r} in bucket {bucket!r}"
        return ObjectNotFound(f"{name} not found ({where}): {hint}", **details)
    if code in _DENIED or status == 403:
        return AccessDenied(
            f"access denied to {where} ({_named(bucket, key)}){detail}: check the credentials "
            "and the bucket policy",
            **details,
        )
    if code in _CHANGED or status == 412:
        now = f", now {actual_etag}" if actual_etag else ""
        return ObjectChanged(
            f"object {key!r} in bucket {bucket!r} changed since it was recorded: expected etag "
            f"{expected_etag}{now}",
            **details,
            expected=expected_etag,
            actual=actual_etag,
        )
    if code in _TRANSIENT or is_transient_status(status):
        return TransientStorageError(f"S3 is unavailable for {where}{detail}, status {status}", **details)
    if code in _INVALID:
        return InvalidInput(f"S3 refused the request for {where}{detail}", **details)
    return StorageError(f"S3 request for {where} failed{detail}, status {status}", **details)


def no_credentials(bucket: str, key: str | None) -> AccessDenied:
    """No credentials anywhere in the chain (config, profile, environment, instance role)."""
    where = f"s3://{bucket}/{key or ''}"
    return AccessDenied(
        f"no usable S3 credentials to access {where} ({_named(bucket, key)}): set "
        "s3.access_key_id/secret_access_key, s3.profile or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
        bucket=bucket,
        key=key,
    )


def _named(bucket: str, key: str | None) -> str:
    """The bucket and, when the call had one, the key: a bucket-level call (a listing, a
    bucket's head) has none, and its message said ``key None`` (newuser44)."""
    return f"bucket {bucket!r}, key {key!r}" if key else f"bucket {bucket!r}"


def unquote_etag(raw: str) -> str:
    """An ETag as S3 sends it (``"abc"``, quotes included) -> ``abc``, as datahub stores it."""
    return raw.strip('"')


def check_answer_etag(answered: str | None, expected: str | None, bucket: str, key: str) -> None:
    """Raise ObjectChanged when a GET sent under If-Match ``expected`` was answered with the
    bytes of another object version (its ``ETag`` header, ``answered``, names another one).

    Why: If-Match is the only tie between a recorded etag and the bytes read. A server or
    proxy that ignores the condition answers 200 with whatever the key now holds, and the
    cache would serve and keep those bytes under the old etag's page names. The answer's
    own ETag is checked as well, at no cost; an answer without one is left to If-Match."""
    if expected is None or answered is None or unquote_etag(answered) == expected:
        return
    raise error_for(
        "PreconditionFailed",
        412,
        bucket,
        key,
        message=f"the server answered a GET under If-Match with etag {unquote_etag(answered)}",
        expected_etag=expected,
    )


def check_answer_range(
    status: int, content_range: str | None, length: int, start: int, end: int | None, bucket: str, key: str
) -> None:
    """Raise StorageError when the answer (``status``, ``Content-Range``, ``length`` bytes of
    body) to a GET of bytes ``[start, end)`` holds other bytes: a ``206`` whose range starts
    elsewhere, or a ``200`` (the whole object: the server ignored ``Range``) that is not
    exactly that slice (a range from 0 that covers the object is).

    Why: a streamed range (``read_chunks``, what the cache's large-object streams read
    through) counts the bytes it receives, not where they came from, so it yielded the
    object's first bytes as the bytes from ``start``, and ``read`` returned more than it was
    asked for."""
    if status == 206:
        first = (content_range or "").removeprefix("bytes ").split("-", 1)[0].strip()
        if content_range is None or (first.isdigit() and int(first) == start):
            return
    elif start == 0 and (end is None or length <= end):
        return
    raise StorageError(
        f"S3 answered a GET of bytes [{start}, {end}) of s3://{bucket}/{key} with other bytes (status "
        f"{status}, Content-Range {content_range!r}, {length} bytes): the endpoint ignores Range, and "
        "datahub reads ranges",
        bucket=bucket,
        key=key,
        status=status,
    )
