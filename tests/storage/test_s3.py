"""S3 specifics: where credentials come from, and wrong ones giving AccessDenied.

Moto accepts any credentials, so these run against the real Ceph RGW, which checks them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.errors import AccessDenied
from datahub.storage import open_store
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config

pytestmark = pytest.mark.ceph


@pytest.fixture
def seeded(ceph_endpoint: S3Endpoint, tmp_path: Path) -> str:
    bucket = ceph_endpoint.new_bucket("creds")
    ceph_endpoint.client().put_object(Bucket=bucket, Key="dir/secret.txt", Body=b"classified")
    return bucket


def _config_without_keys(endpoint: S3Endpoint, tmp_path: Path):
    config = make_config(tmp_path, endpoint)
    config.s3.access_key_id = config.s3.secret_access_key = None
    return config


def test_wrong_credentials_give_access_denied_naming_bucket_and_key(ceph_endpoint, seeded, tmp_path) -> None:
    config = make_config(tmp_path, ceph_endpoint)
    config.s3.access_key_id, config.s3.secret_access_key = "WRONGKEY000000000000", "not-the-secret"
    store = open_store(f"s3://{seeded}", config)
    for call in (
        lambda: store.stat("dir/secret.txt"),
        lambda: store.read("dir/secret.txt", 0, 4),
        lambda: store.put("dir/new.txt", b"x"),
        lambda: list(store.list(prefix="dir/")),
    ):
        with pytest.raises(AccessDenied) as err:
            call()
        assert seeded in err.value.message and "dir/" in err.value.message
    store.close()


def test_credentials_from_the_environment(ceph_endpoint, seeded, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ceph_endpoint.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ceph_endpoint.secret_key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    store = open_store(f"s3://{seeded}", _config_without_keys(ceph_endpoint, tmp_path))
    assert store.read("dir/secret.txt") == b"classified"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    store2 = open_store(f"s3://{seeded}", _config_without_keys(ceph_endpoint, tmp_path))
    with pytest.raises(AccessDenied):
        store2.read("dir/secret.txt")


def test_credentials_from_a_named_profile(ceph_endpoint, seeded, tmp_path, monkeypatch) -> None:
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[datahub-test]\naws_access_key_id = {ceph_endpoint.access_key}\n"
        f"aws_secret_access_key = {ceph_endpoint.secret_key}\n"
    )
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    config = _config_without_keys(ceph_endpoint, tmp_path)
    config.s3.profile = "datahub-test"
    store = open_store(f"s3://{seeded}/dir", config)
    assert [i.key for i in store.list()] == ["secret.txt"]
