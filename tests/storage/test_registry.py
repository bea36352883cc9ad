"""open_store and StoreRegistry: URL parsing, store caching, shared S3 connections."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from datahub.config import load_config
from datahub.errors import InvalidInput, InvalidKey, StorageError
from datahub.storage import LocalStore, MemoryStore, StoreRegistry, open_store, split_object_url
from datahub.storage.s3 import S3Store
from tests.storage.conftest import make_config


@pytest.mark.parametrize(
    ("url", "root", "key"),
    [
        ("s3://bucket/a/b.jpg", "s3://bucket", "a/b.jpg"),
        ("s3://bucket/k", "s3://bucket", "k"),
        ("file:///data/sets/x.png", "file:///", "data/sets/x.png"),
        ("file:///with%20space/x", "file:///", "with space/x"),
        ("file://localhost/abs/x", "file:///", "abs/x"),
        ("memory://space/a/b", "memory://space", "a/b"),
    ],
)
def test_split_object_url(url: str, root: str, key: str) -> None:
    assert split_object_url(url) == (root, key)


@pytest.mark.parametrize(
    "url",
    ["", "bucket/key", "http://host/x", "s3://", "s3://bucket", "s3://bucket/", "s3://b/dir/", "file://host/x",
     "memory://m/k?x=1", "gs://b/k"],
)  # fmt: skip
def test_bad_urls_are_refused(url: str, config) -> None:
    with pytest.raises(InvalidInput):
        split_object_url(url)


def test_open_store_by_scheme(config, tmp_path: Path) -> None:
    local = open_store((tmp_path / "objs").as_uri(), config)
    assert isinstance(local, LocalStore) and local.root == tmp_path / "objs"
    mem = open_store("memory://reg-test/pre", config)
    assert isinstance(mem, MemoryStore) and mem.root_url == "memory://reg-test/pre"
    s3 = open_store("s3://bkt/some/prefix/", config)
    assert isinstance(s3, S3Store) and s3.root_url == "s3://bkt/some/prefix" and s3.prefix == "some/prefix/"
    s3.close()
    with pytest.raises(InvalidInput, match="scheme"):
        open_store("ftp://x/y", config)


def test_registry_resolves_and_caches(tmp_path: Path, config) -> None:
    data = tmp_path / "d i r"
    with StoreRegistry(config) as reg:
        local = open_store(data.as_uri(), config)
        info = local.put("sub/x.bin", b"bytes")
        url = local.url_for("sub/x.bin")
        assert url == (data / "sub/x.bin").as_uri()  # percent-encoded, as Path.as_uri makes it
        store, key = reg.for_url(url)
        assert store.read(key, etag=info.etag) == b"bytes"
        assert reg.for_url((data / "other").as_uri())[0] is store  # one store for every file URL
        m1, k1 = reg.for_url("memory://reg-cache/a/b")
        m2, _ = reg.for_url("memory://reg-cache/c")
        assert m1 is m2 and k1 == "a/b"
        assert reg.store("memory://reg-cache") is m1


def test_url_for_round_trips_through_the_registry(config, tmp_path: Path) -> None:
    with StoreRegistry(config) as reg:
        for root in [(tmp_path / "rt").as_uri(), "memory://rt-space/pre"]:
            store = open_store(root, config)
            for key in ["plain", "sp ace/x", "pct%20/y", "caf\u00e9.jpg"]:
                store.put(key, key.encode())
                other, k = reg.for_url(store.url_for(key))
                assert other.read(k) == key.encode(), (root, key)


def test_s3_stores_share_one_connection_and_close_once(tmp_path: Path, moto_endpoint) -> None:
    config = make_config(tmp_path, moto_endpoint)
    b1, b2 = moto_endpoint.new_bucket(), moto_endpoint.new_bucket()
    reg = StoreRegistry(config)
    s1, k1 = reg.for_url(f"s3://{b1}/x/y")
    s2, _ = reg.for_url(f"s3://{b2}/z")
    assert k1 == "x/y" and s1 is not s2 and s1._conn is s2._conn
    assert reg.for_url(f"s3://{b1}/other")[0] is s1
    s1.put(k1, b"hello")
    assert s1.read(k1) == b"hello"
    reg.close()
    with pytest.raises(InvalidInput, match="closed"):
        reg.for_url(f"s3://{b1}/x/y")


def test_the_shared_tiers_store_reaches_s3_with_cache_shared_s3(tmp_path: Path, moto_endpoint) -> None:
    """[s3] here points at no server: only cache.shared_s3 reaches moto, and only for shared_store."""
    moto = moto_endpoint.s3_config_overrides()["s3"]
    nowhere = {**moto, "endpoint_url": "http://127.0.0.1:9", "max_attempts": 1, "total_timeout": 5.0}
    config = load_config(
        env={}, overrides={"home": str(tmp_path), "s3": nowhere, "cache": {"shared_s3": moto}}
    )
    bucket = moto_endpoint.new_bucket()
    reg = StoreRegistry(config)
    shared = reg.shared_store(f"s3://{bucket}/pool")
    shared.put("pages/p", b"page")
    assert reg.shared_store(f"s3://{bucket}/pool") is shared and shared.read("pages/p") == b"page"
    with pytest.raises(StorageError):
        reg.store(f"s3://{bucket}/pool").read("pages/p")  # [s3]: the other settings
    assert reg.shared_store("memory://pool") is reg.store("memory://pool")  # no S3: the one store
    reg.close()
    with pytest.raises(InvalidInput, match="closed"):
        reg.shared_store(f"s3://{bucket}/pool")


def test_registry_is_thread_safe(config) -> None:
    reg = StoreRegistry(config)
    seen, barrier = [], threading.Barrier(8)

    def resolve() -> None:
        barrier.wait()
        seen.append(reg.for_url("memory://reg-threads/k")[0])

    threads = [threading.Thread(target=resolve) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s) for s in seen}) == 1
    reg.close()


def test_registry_refuses_traversal_in_file_urls(config) -> None:
    with pytest.raises(InvalidKey):
        StoreRegistry(config).for_url("file:///tmp/../etc/passwd")


def test_an_unknown_s3_profile_is_a_clear_error(config, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    config.s3.profile = "no-such-profile"
    with pytest.raises(InvalidInput, match="no-such-profile"):
        open_store("s3://bucket", config)
