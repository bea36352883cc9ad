"""The lean signed GET (``datahub.storage.s3get``): botocore's SigV4 signatures over urllib3, S3
addressing, credentials that rotate, and the read contract kept on both GET paths against
moto and Ceph RGW (RGW checks every signature, so a wrongly canonicalised key fails there)."""

from __future__ import annotations

import datetime
import hashlib
import itertools
import os
import re
from pathlib import Path
from unittest import mock

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from botocore.credentials import RefreshableCredentials
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.errors import AccessDenied, ObjectChanged, ObjectNotFound, StorageError
from datahub.storage import open_store
from datahub.storage.s3 import S3Connection, S3Store
from datahub.storage.s3get import LeanGetter, sign, sign_get
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config
from tests.storage.cutproxy import CutProxy

ODD_KEYS = [
    "caf\u00e9/x y+z.jpg",
    "a=b&c;d/e%20f",
    "tilde~and-dash_dot.",
    "sp  ace/(1)!*'",
    "deep/" * 5 + "k",
    "q?uery#frag/100%+%2F plus+/\u65e5\u672c/\U0001f600",
]
_CREDENTIAL = re.compile(r"Credential=([^/]+)/")


def getter(
    path_style: bool = True, endpoint: str = "http://127.0.0.1:9000", credentials: object = None
) -> LeanGetter:
    creds = credentials or BotoCredentials("AKID", "SECRET")
    return LeanGetter(
        endpoint,
        "us-east-1",
        lambda: creds,
        path_style=path_style,
        connect_timeout=5,
        read_timeout=5,
        max_pool_connections=1,
    )


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


def test_a_session_token_is_sent_and_rotated_keys_are_used(moto_endpoint: S3Endpoint, tmp_path: Path) -> None:
    """Refreshable temporary credentials: each GET signs with what botocore holds right now."""
    bucket = moto_endpoint.new_bucket("rot")
    seed = S3Store(bucket, "", make_config(tmp_path, moto_endpoint).s3)
    etag = seed.put("k", b"payload").etag
    generation = itertools.count(1)

    def refresh() -> dict[str, str]:
        n = next(generation)
        # 12 minutes left: past botocore's advisory refresh point, so every use refreshes
        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=12)
        return {
            "access_key": f"ROTKEY{n}",
            "secret_key": f"secret{n}",
            "token": f"tok/{n}+=",
            "expiry_time": expiry.isoformat(),
        }

    creds = RefreshableCredentials.create_from_metadata(refresh(), refresh, "test-sts")
    with CutProxy(moto_endpoint.url, cut_after=0, times=0) as proxy:
        lean = getter(endpoint=proxy.url, credentials=creds)
        for _ in range(2):
            body = lean.get(bucket, "k", None, etag)
            assert body is not None and body.read_all() == b"payload"
        lean.close()
    seen = [
        (_CREDENTIAL.search(h["authorization"]).group(1), h["x-amz-security-token"])
        for h in proxy.get_headers
    ]
    assert seen == [("ROTKEY2", "tok/2+="), ("ROTKEY3", "tok/3+=")]
    seed.close()


def test_a_session_token_from_the_environment_reaches_the_server(
    moto_endpoint: S3Endpoint, tmp_path: Path, monkeypatch
) -> None:
    """Boto's chain (here: the environment) is where the lean GET gets its keys and token."""
    bucket = moto_endpoint.new_bucket("tok")
    seed = S3Store(bucket, "", make_config(tmp_path, moto_endpoint).s3)
    seed.put("k", b"v")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session/token+=")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with CutProxy(moto_endpoint.url, cut_after=0, times=0) as proxy:
        config = make_config(tmp_path, moto_endpoint)
        config.s3.endpoint_url = proxy.url
        config.s3.access_key_id = config.s3.secret_access_key = None
        store = open_store(f"s3://{bucket}", config)
        assert store._conn.getter is not None
        assert store.read("k") == b"v"
        store.close()
    assert [h["x-amz-security-token"] for h in proxy.get_headers] == ["session/token+="]
    assert _CREDENTIAL.search(proxy.get_headers[0]["authorization"]).group(1) == "ENVKEY"
    seed.close()


@pytest.mark.ceph
def test_rgw_refuses_a_lean_get_signed_with_the_wrong_secret(
    ceph_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """RGW checks signatures: a right key with a wrong secret is AccessDenied, a right one reads."""
    bucket = ceph_endpoint.new_bucket("sig")
    seed = S3Store(bucket, "", make_config(tmp_path, ceph_endpoint).s3)
    etag = seed.put("k", b"v").etag
    good = getter(
        endpoint=ceph_endpoint.url,
        credentials=BotoCredentials(ceph_endpoint.access_key, ceph_endpoint.secret_key),
    )
    bad = getter(endpoint=ceph_endpoint.url, credentials=BotoCredentials(ceph_endpoint.access_key, "wrong"))
    body = good.get(bucket, "k", None, etag)
    assert body is not None and body.read_all() == b"v"
    with pytest.raises(AccessDenied):
        bad.get(bucket, "k", None, etag)
    good.close()
    bad.close()
    seed.close()


_HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(min_size=1, max_size=60).filter(lambda k: "\x00" not in k),
    byte_range=st.none() | st.tuples(st.integers(0, 10**12), st.integers(0, 10**12)),
    if_match=st.none() | _HEADER_TEXT,
    token=st.none() | _HEADER_TEXT.filter(bool),
    region=st.sampled_from(["us-east-1", "eu-west-2", "default"]),
    secret=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40),
    https=st.booleans(),
    when=st.datetimes(datetime.datetime(2000, 1, 1), datetime.datetime(2099, 12, 31)),
)
def test_the_signature_is_botocores_header_for_header(
    key, byte_range, if_match, token, region, secret, https, when
) -> None:
    """``sign_get`` is SigV4 written out for one GET; botocore's ``S3SigV4Auth`` is the
    reference: for any key, range, If-Match value (spaces included), session token, region
    and instant, both produce the same headers, Authorization included."""
    host, path = getter(False, f"{'https' if https else 'http'}://s3.example.test")._target("bkt", key)
    headers = {}
    if byte_range is not None:
        headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
    if if_match is not None:
        headers["If-Match"] = f'"{if_match}"'
    creds = BotoCredentials("AKIDEXAMPLE", secret, token).get_frozen_credentials()
    reference = AWSRequest(
        "GET", f"{'https' if https else 'http'}://{host}{path}", headers={"Host": host, **headers}
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        S3SigV4Auth(creds, "s3", region).add_auth(reference)
    ours = dict(headers)
    sign_get(path, host, ours, creds, region, now=when)
    assert ours == dict(reference.headers.items())


@settings(max_examples=200, deadline=None)
@given(
    key=st.text(min_size=1, max_size=60).filter(lambda k: "\x00" not in k),
    payload=st.binary(max_size=2000),
    token=st.none() | _HEADER_TEXT.filter(bool),
    region=st.sampled_from(["us-east-1", "eu-west-2", "default"]),
    https=st.booleans(),
    when=st.datetimes(datetime.datetime(2000, 1, 1), datetime.datetime(2099, 12, 31)),
)
def test_a_put_is_signed_as_botocore_signs_it_with_its_payload(
    key, payload, token, region, https, when
) -> None:
    """``sign("PUT", …)`` with the body's SHA-256 is what botocore's ``S3SigV4Auth`` gives a
    PUT whose payload it signs (over http always; over https when payload signing is on)."""
    scheme = "https" if https else "http"
    host, path = getter(True, f"{scheme}://s3.example.test")._target("bkt", key)
    creds = BotoCredentials("AKIDEXAMPLE", "SECRET/x+y", token).get_frozen_credentials()
    reference = AWSRequest("PUT", f"{scheme}://{host}{path}", headers={"Host": host}, data=payload)
    reference.context["payload_signing_enabled"] = True
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        S3SigV4Auth(creds, "s3", region).add_auth(reference)
    ours: dict[str, str] = {}
    sign("PUT", path, host, ours, creds, region, hashlib.sha256(payload).hexdigest(), now=when)
    assert ours == dict(reference.headers.items())


@pytest.mark.ceph
@pytest.mark.parametrize("size", [100_000, 4 * 1024**2])
def test_rgw_checks_a_lean_put(ceph_endpoint: S3Endpoint, tmp_path: Path, size: int) -> None:
    """RGW checks a lean PUT's signature and its body's SHA-256: a wrong secret is
    AccessDenied (also when RGW refuses before reading a large body); a body that is not the
    one signed is refused, and nothing is stored; a right one is stored exactly."""
    bucket = ceph_endpoint.new_bucket("leanput")
    payload = os.urandom(size)
    good = getter(
        endpoint=ceph_endpoint.url,
        credentials=BotoCredentials(ceph_endpoint.access_key, ceph_endpoint.secret_key),
    )
    bad = getter(endpoint=ceph_endpoint.url, credentials=BotoCredentials(ceph_endpoint.access_key, "wrong"))
    with pytest.raises(AccessDenied):
        bad.put(bucket, "k", payload)
    real_sign = sign

    def sign_other_bytes(method, path, host, headers, creds, region, digest, now=None):
        real_sign(method, path, host, headers, creds, region, hashlib.sha256(b"other").hexdigest(), now)

    with mock.patch("datahub.storage.s3get.sign", sign_other_bytes), pytest.raises(StorageError):
        good.put(bucket, "k", payload)
    with pytest.raises(ObjectNotFound):
        good.get(bucket, "k", None, None)
    etag = good.put(bucket, "k", payload)
    body = good.get(bucket, "k", None, etag)
    assert body is not None and body.read_all() == payload
    good.close()
    bad.close()
