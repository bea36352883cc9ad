"""S3 ``read_chunks`` against real servers when the stream fails: before the first byte
(retried), in the middle (raised, never silently restarted), and with the object replaced
meanwhile (ObjectChanged). Sleeps are recorded, never waited."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datahub.errors import ObjectChanged, TransientStorageError
from datahub.storage.retry import RetryPolicy
from datahub.storage.s3 import S3Store
from tests.faults import FlakyProxy
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config
from tests.storage.cutproxy import CutProxy

KiB = 1024
CHUNK = 64 * KiB


@pytest.fixture
def bucket(s3_endpoint: S3Endpoint) -> str:
    return s3_endpoint.new_bucket("stream")


@pytest.fixture
def direct(s3_endpoint: S3Endpoint, bucket: str, tmp_path: Path) -> S3Store:
    store = S3Store(bucket, "", make_config(tmp_path, s3_endpoint).s3)
    yield store
    store.close()


@pytest.fixture(params=[True, False], ids=["lean", "boto3"])
def lean(request) -> bool:
    """Both GET paths: the lean signed GET and boto3 (used when a proxy is configured)."""
    return request.param


def via(url: str, endpoint: S3Endpoint, bucket: str, tmp_path: Path, sleep, lean: bool) -> S3Store:
    config = make_config(tmp_path, endpoint).s3
    config.endpoint_url = url
    retry = RetryPolicy(3, base=0.1, cap=1.0, sleep=sleep, random=lambda: 1.0)
    return S3Store(bucket, "", config, retry=retry, lean_get=lean)


def test_a_failure_before_the_first_byte_is_retried(
    s3_endpoint, bucket, direct, tmp_path, fake_sleep, lean
) -> None:
    payload = os.urandom(300 * KiB)
    info = direct.put("obj", payload)
    with FlakyProxy(s3_endpoint.url, fail_first=2, status=503) as proxy:
        store = via(proxy.url, s3_endpoint, bucket, tmp_path, fake_sleep, lean)
        assert b"".join(store.read_chunks("obj", 10, None, etag=info.etag, chunk_size=CHUNK)) == payload[10:]
        assert proxy.failed == 2 and len(proxy.requests) == 3 and fake_sleep.slept == [0.1, 0.2]
        store.close()


def test_a_body_cut_inside_the_first_chunk_is_retried(
    s3_endpoint, bucket, direct, tmp_path, fake_sleep, lean
) -> None:
    """Nothing reached the caller yet, so the retry policy may start over."""
    payload = os.urandom(300 * KiB)
    info = direct.put("obj", payload)
    with CutProxy(s3_endpoint.url, cut_after=CHUNK // 2) as proxy:
        store = via(proxy.url, s3_endpoint, bucket, tmp_path, fake_sleep, lean)
        assert b"".join(store.read_chunks("obj", etag=info.etag, chunk_size=CHUNK)) == payload
        assert (proxy.cut, proxy.gets) == (1, 2) and fake_sleep.slept == [0.1]
        store.close()


def test_a_body_cut_after_bytes_were_yielded_raises_transient(
    s3_endpoint, bucket, direct, tmp_path, fake_sleep, lean
) -> None:
    payload = os.urandom(300 * KiB)
    info = direct.put("obj", payload)
    with CutProxy(s3_endpoint.url, cut_after=3 * CHUNK + 100) as proxy:
        store = via(proxy.url, s3_endpoint, bucket, tmp_path, fake_sleep, lean)
        got = []
        with pytest.raises(TransientStorageError) as err:
            for chunk in store.read_chunks("obj", 7, None, etag=info.etag, chunk_size=CHUNK):
                got.append(chunk)
        assert b"".join(got) == payload[7 : 7 + len(b"".join(got))] and len(got) >= 1
        assert proxy.gets == 1 and fake_sleep.slept == []  # never silently restarted
        received = len(b"".join(got))
        assert f"read again from byte {7 + received}" in err.value.message
        assert bucket in err.value.message and "obj" in err.value.message
        store.close()


def test_a_body_cut_after_the_object_was_replaced_is_object_changed(
    s3_endpoint, bucket, direct, tmp_path, fake_sleep, lean
) -> None:
    old = direct.put("obj", os.urandom(300 * KiB))
    with CutProxy(s3_endpoint.url, cut_after=2 * CHUNK + 1) as proxy:
        store = via(proxy.url, s3_endpoint, bucket, tmp_path, fake_sleep, lean)
        stream = store.read_chunks("obj", etag=old.etag, chunk_size=CHUNK)
        next(stream)
        new = direct.put("obj", b"something else")
        with pytest.raises(ObjectChanged) as err:
            list(stream)
        assert old.etag in err.value.message and new.etag in err.value.message
        store.close()


def test_read_retries_a_body_cut_short(s3_endpoint, bucket, direct, tmp_path, fake_sleep, lean) -> None:
    """``read`` returns whole bodies only: a cut one is a transient failure, retried."""
    payload = os.urandom(300 * KiB)
    info = direct.put("obj", payload)
    with CutProxy(s3_endpoint.url, cut_after=100 * KiB) as proxy:
        store = via(proxy.url, s3_endpoint, bucket, tmp_path, fake_sleep, lean)
        assert store.read("obj", 5, None, etag=info.etag) == payload[5:]
        assert (proxy.cut, proxy.gets) == (1, 2) and fake_sleep.slept == [0.1]
        store.close()
