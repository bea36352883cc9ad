"""The one S3 error table: codes and statuses to datahub errors naming bucket and key."""

from __future__ import annotations

import pytest

from datahub.errors import (
    AccessDenied,
    InvalidInput,
    ObjectChanged,
    ObjectNotFound,
    StorageError,
    TransientStorageError,
)
from datahub.storage.s3errors import error_for


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("NoSuchKey", 404, ObjectNotFound),
        ("NoSuchBucket", 404, ObjectNotFound),
        ("404", 404, ObjectNotFound),  # HEAD: no body, only the status
        ("AccessDenied", 403, AccessDenied),
        ("InvalidAccessKeyId", 403, AccessDenied),
        ("SignatureDoesNotMatch", 403, AccessDenied),
        ("403", 403, AccessDenied),
        ("PreconditionFailed", 412, ObjectChanged),
        ("412", 412, ObjectChanged),
        ("SlowDown", 503, TransientStorageError),
        ("TooManyRequests", 429, TransientStorageError),
        ("InternalError", 500, TransientStorageError),
        ("RequestTimeout", 400, TransientStorageError),
        ("Whatever", 502, TransientStorageError),
        ("InvalidBucketName", 400, InvalidInput),
        ("MalformedXML", 400, StorageError),
    ],
)
def test_error_table(code: str, status: int, kind: type) -> None:
    err = error_for(code, status, "bkt", "dir/key.jpg")
    assert type(err) is kind
    assert "bkt" in err.message
    if kind is not ObjectNotFound or code != "NoSuchBucket":
        assert "dir/key.jpg" in err.message
    assert err.details["bucket"] == "bkt" and err.details["key"] == "dir/key.jpg"


def test_transient_is_a_storage_error() -> None:
    assert isinstance(error_for("SlowDown", 503, "b", "k"), StorageError)


def test_object_changed_names_both_etags() -> None:
    err = error_for("PreconditionFailed", 412, "b", "k", expected_etag="aaa", actual_etag="bbb")
    assert "'k'" in err.message and "aaa" in err.message and "bbb" in err.message
    assert err.details["expected"] == "aaa" and err.details["actual"] == "bbb"


def test_missing_bucket_says_so() -> None:
    err = error_for("NoSuchBucket", 404, "nope", None)
    assert "bucket 'nope' not found" in err.message and "bucket name" in err.message


@pytest.mark.parametrize(
    ("code", "status"), [("AccessDenied", 403), ("MalformedXML", 400), ("SlowDown", 503)]
)
def test_bucket_level_call_names_no_key(code: str, status: int) -> None:
    """A listing or a bucket's head has no key: its message names the bucket alone (it said ``key None``)."""
    from datahub.storage.s3errors import no_credentials

    for err in (error_for(code, status, "bkt", None), no_credentials("bkt", None)):
        assert "None" not in str(err)
        assert "'bkt'" in str(err) or "s3://bkt" in str(err)
