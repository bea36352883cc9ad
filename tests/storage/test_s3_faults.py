"""Retries against a real flaky server: FlakyProxy (tests/faults.py) in front of moto.

Sleeps are recorded, never waited, so these tests do not depend on timing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datahub.errors import AccessDenied, ObjectNotFound, TransientStorageError
from datahub.storage.retry import RetryPolicy
from datahub.storage.s3 import S3Store
from tests.faults import FlakyProxy
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config

MiB = 1024 * 1024


@pytest.fixture
def bucket(moto_endpoint: S3Endpoint) -> str:
    return moto_endpoint.new_bucket("flaky")


@pytest.fixture
def direct(moto_endpoint: S3Endpoint, bucket: str, tmp_path: Path) -> S3Store:
    """A store that talks to moto directly: seeds and checks what went through the proxy."""
    store = S3Store(bucket, "", make_config(tmp_path, moto_endpoint).s3)
    yield store
    store.close()


def through(proxy: FlakyProxy, endpoint: S3Endpoint, bucket: str, tmp_path: Path, sleep, **s3) -> S3Store:
    config = make_config(tmp_path, endpoint).s3
    config.endpoint_url = proxy.url
    page_size = s3.pop("page_size", 1000)
    for k, v in s3.items():
        setattr(config, k, v)
    retry = RetryPolicy(config.max_attempts, base=0.1, cap=1.0, sleep=sleep, random=lambda: 1.0)
    return S3Store(bucket, "", config, retry=retry, page_size=page_size)


@pytest.mark.parametrize("status", [503, 500, 502, 504, 429, 0])  # 0: connection dropped
def test_reads_survive_transient_failures(
    moto_endpoint, bucket, direct, tmp_path, fake_sleep, status
) -> None:
    payload = os.urandom(100_000)
    info = direct.put("obj", payload)
    with FlakyProxy(moto_endpoint.url, fail_first=3, status=status) as proxy:
        store = through(proxy, moto_endpoint, bucket, tmp_path, fake_sleep, max_attempts=5)
        assert store.read("obj", 10, 90_000, etag=info.etag) == payload[10:90_000]
        assert proxy.failed == 3
        assert len(proxy.requests) == 4  # boto's own retries are off: one request per attempt
        assert fake_sleep.slept == [0.1, 0.2, 0.4]  # capped exponential backoff (random pinned to 1)
        store.close()


def test_exhausted_retries_raise_transient_storage_error(
    moto_endpoint, bucket, direct, tmp_path, fake_sleep
) -> None:
    direct.put("obj", b"x")
    with FlakyProxy(moto_endpoint.url, fail_first=100, status=503) as proxy:
        store = through(proxy, moto_endpoint, bucket, tmp_path, fake_sleep, max_attempts=3)
        with pytest.raises(TransientStorageError) as err:
            store.read("obj")
        assert len(proxy.requests) == 3
        assert "gave up after 3 attempts" in err.value.message
        assert bucket in err.value.message and "obj" in err.value.message
        assert err.value.details["attempts"] == 3
        store.close()


@pytest.mark.parametrize(("status", "error"), [(404, ObjectNotFound), (403, AccessDenied)])
def test_permanent_errors_are_not_retried(moto_endpoint, bucket, tmp_path, fake_sleep, status, error) -> None:
    with FlakyProxy(moto_endpoint.url, fail_first=1, status=status) as proxy:
        store = through(proxy, moto_endpoint, bucket, tmp_path, fake_sleep, max_attempts=5)
        with pytest.raises(error) as err:
            store.stat("some/key")
        assert len(proxy.requests) == 1 and fake_sleep.slept == []
        assert bucket in err.value.message and "some/key" in err.value.message
        store.close()


def test_a_stalled_server_times_out_and_is_retried(
    moto_endpoint, bucket, direct, tmp_path, fake_sleep
) -> None:
    """The proxy holds the first request far longer than the read timeout; the retry succeeds."""
    direct.put("slow", b"patience")
    with FlakyProxy(moto_endpoint.url, fail_first=1, status=503, delay=3.0) as proxy:
        store = through(proxy, moto_endpoint, bucket, tmp_path, fake_sleep, max_attempts=3, read_timeout=0.3)
        assert store.read("slow") == b"patience"
        assert proxy.failed == 1 and len(fake_sleep.slept) == 1
        store.close()


def test_a_failed_multipart_part_is_retried(moto_endpoint, bucket, direct, tmp_path, fake_sleep) -> None:
    payload = os.urandom(11 * MiB)
    with FlakyProxy(
        moto_endpoint.url, fail_first=2, match=lambda method, path: method == "PUT" and "partNumber=2" in path
    ) as proxy:
        store = through(
            proxy,
            moto_endpoint,
            bucket,
            tmp_path,
            fake_sleep,
            multipart_threshold=MiB,
            multipart_chunk=5 * MiB,
        )
        info = store.put("multi", payload)
        assert proxy.failed == 2 and info.etag.endswith("-3")
        store.close()
    assert direct.read("multi", etag=info.etag) == payload


def test_a_failed_listing_page_is_retried(moto_endpoint, bucket, direct, tmp_path, fake_sleep) -> None:
    keys = [f"k{i:02d}" for i in range(10)]
    for k in keys:
        direct.put(k, b"v")
    with FlakyProxy(
        moto_endpoint.url, fail_first=1, match=lambda method, path: "continuation-token" in path
    ) as proxy:
        store = through(proxy, moto_endpoint, bucket, tmp_path, fake_sleep, page_size=3)
        assert [i.key for i in store.list()] == keys
        assert proxy.failed == 1
        assert sum("list-type=2" in path for _, path in proxy.requests) == 5  # 4 pages + 1 retry
        store.close()


def test_puts_and_deletes_are_retried(moto_endpoint, bucket, direct, tmp_path, fake_sleep) -> None:
    with FlakyProxy(moto_endpoint.url, fail_first=2, status=503) as proxy:
        store = through(proxy, moto_endpoint, bucket, tmp_path, fake_sleep)
        info = store.put("p", b"payload")
        proxy.fail_more(2)
        store.delete("gone")
        assert proxy.failed == 4
        store.close()
    assert direct.read("p", etag=info.etag) == b"payload"


def test_a_part_that_keeps_failing_aborts_the_upload(
    moto_endpoint, bucket, direct, tmp_path, fake_sleep
) -> None:
    """Nothing half-written: no object, and no multipart upload left behind."""
    with FlakyProxy(
        moto_endpoint.url,
        fail_first=100,
        match=lambda method, path: method == "PUT" and "partNumber=2" in path,
    ) as proxy:
        store = through(
            proxy, moto_endpoint, bucket, tmp_path, fake_sleep,
            multipart_threshold=MiB, multipart_chunk=5 * MiB, max_attempts=2,
        )  # fmt: skip
        with pytest.raises(TransientStorageError, match="gave up after 2 attempts"):
            store.put("doomed", os.urandom(16 * MiB))
        assert proxy.failed == 2
        store.close()
    with pytest.raises(ObjectNotFound):
        direct.stat("doomed")
    assert moto_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
