"""The lean signed GET (``datahub.storage.s3get``): signatures byte-identical to botocore's,
S3 addressing, and the read contract kept on both GET paths against moto and Ceph RGW
(RGW checks every signature, so a wrongly canonicalised key fails there)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from datahub.errors import ObjectChanged, ObjectNotFound
from datahub.storage.s3 import S3Connection, S3Store
from datahub.storage.s3get import Credentials, LeanGetter, SigV4
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config

WHEN = datetime.datetime(2026, 11, 22, 3, 4, 5, tzinfo=datetime.UTC)
ODD_KEYS = [
    "caf\u00e9/x y+z.jpg",
    "a=b&c;d/e%20f",
    "tilde~and-dash_dot.",
    "sp  ace/(1)!*'",
    "deep/" * 5 + "k",
]


def getter(path_style: bool = True, endpoint: str = "http://127.0.0.1:9000") -> LeanGetter:
    return LeanGetter(
        endpoint,
        "eu-west-2",
        lambda: Credentials("AKID", "SECRET"),
        path_style=path_style,
        connect_timeout=1,
        read_timeout=1,
        max_pool_connections=1,
    )


@pytest.mark.parametrize("token", [None, "session-token/+="])
@pytest.mark.parametrize("key", ODD_KEYS)
def test_the_signature_is_the_one_botocore_computes(monkeypatch, key: str, token: str | None) -> None:
    host, path = getter()._target("bucket", key)
    mine: dict[str, str] = {}
    SigV4("eu-west-2", clock=WHEN.timestamp).sign(host, path, Credentials("AKID", "SECRET", token), mine)

    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: WHEN.replace(tzinfo=None))
    request = AWSRequest("GET", f"http://{host}{path}", headers={})
    botocore.auth.S3SigV4Auth(BotoCredentials("AKID", "SECRET", token), "s3", "eu-west-2").add_auth(request)
    assert mine["Authorization"] == request.headers["Authorization"]
    assert mine["x-amz-date"] == request.headers["X-Amz-Date"] == "20261122T030405Z"


def test_the_signing_key_is_derived_once_per_day() -> None:
    now = [WHEN.timestamp()]
    signer = SigV4("us-east-1", clock=lambda: now[0])
    for _ in range(3):
        signer.sign("h", "/b/k", Credentials("AKID", "SECRET"), {})
        now[0] += 60
    assert len(signer._keys) == 1
    now[0] += 86_400
    signer.sign("h", "/b/k", Credentials("AKID", "SECRET"), {})
    assert len(signer._keys) == 2


def test_addressing_follows_path_style_and_bucket_names() -> None:
    assert getter(True)._target("bkt", "a b/c") == ("127.0.0.1:9000", "/bkt/a%20b/c")
    virtual = getter(False, "https://s3.eu-west-2.amazonaws.com")
    assert virtual._target("bkt", "k") == ("bkt.s3.eu-west-2.amazonaws.com", "/k")
    assert virtual._target("dotted.bucket", "k") == ("s3.eu-west-2.amazonaws.com", "/dotted.bucket/k")
    assert getter(False, "http://gw:81/s3")._target("bkt", "k") == ("gw:81", "/s3/bkt/k")


def test_a_proxy_in_the_environment_sends_gets_through_boto3(tmp_path: Path, monkeypatch) -> None:
    config = make_config(tmp_path).s3
    config.endpoint_url, config.access_key_id, config.secret_access_key = "http://127.0.0.1:9", "k", "s"
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert S3Connection(config).getter is None
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert S3Connection(config).getter is not None
    assert S3Connection(config, lean_get=False).getter is None


@pytest.fixture(params=[True, False], ids=["lean", "boto3"])
def store(request, s3_endpoint: S3Endpoint, tmp_path: Path) -> S3Store:
    bucket = s3_endpoint.new_bucket("get")
    s = S3Store(bucket, "pre fix", make_config(tmp_path, s3_endpoint).s3, lean_get=request.param)
    assert (s._conn.getter is not None) == request.param
    yield s
    s.close()


def test_odd_keys_read_back_exactly(store: S3Store) -> None:
    for key in ODD_KEYS:
        payload = os.urandom(5000)
        info = store.put(key, payload)
        assert store.read(key, etag=info.etag) == payload
        assert store.read(key, 100, 200, etag=info.etag) == payload[100:200]
        assert b"".join(store.read_chunks(key, 1, None, etag=info.etag, chunk_size=999)) == payload[1:]


def test_both_get_paths_keep_the_read_contract(store: S3Store) -> None:
    old = store.put("obj", b"0123456789")
    assert store.read("obj", 3, 7, etag=old.etag) == b"3456"
    assert store.read("obj", 8, 100, etag=old.etag) == b"89"
    assert store.read("obj", 10, None, etag=old.etag) == b""  # 416 from the server: an empty slice
    assert list(store.read_chunks("obj", 20, None, etag=old.etag)) == []
    new = store.put("obj", b"changed")
    for call in (
        lambda: store.read("obj", etag=old.etag),
        lambda: store.read("obj", 50, None, etag=old.etag),
        lambda: list(store.read_chunks("obj", 0, 4, etag=old.etag)),
    ):
        with pytest.raises(ObjectChanged) as err:
            call()
        assert old.etag in err.value.message and new.etag in err.value.message
        assert "pre fix/obj" in err.value.message and store.bucket in err.value.message
    with pytest.raises(ObjectNotFound) as err:
        store.read("missing", 0, 5)
    assert "pre fix/missing" in err.value.message
    empty = store.put("empty", b"")
    assert store.read("empty", etag=empty.etag) == b"" and list(store.read_chunks("empty")) == []
