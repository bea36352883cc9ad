"""An import lists a bucket's sub-prefixes in parallel (issue 38 item 3), in key order."""

from __future__ import annotations

import threading

import pytest

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.ingest import import_source
from datahub.ingest.listing import parallel_list
from datahub.storage import StoreRegistry, open_store

KEYS = sorted(
    [f"ds/{top}/{sub}/{i}.jpg" for top in ("a", "b", "c") for sub in ("x", "y", "z") for i in range(3)]
    + ["ds/top.txt", "ds/b0", "ds/a/loose.jpg", "ds/c/z/", "ds/d/only.bin"]
)


@pytest.fixture
def bucket(tmp_path, moto_endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    config.home_path.mkdir(parents=True)
    name = moto_endpoint.new_bucket("plist")
    client = moto_endpoint.client()
    for key in KEYS:
        client.put_object(Bucket=name, Key=key, Body=b"" if key.endswith("/") else key.encode())
    return config, name


def test_parallel_listing_yields_what_one_listing_yields(bucket) -> None:
    config, name = bucket
    store = open_store(f"s3://{name}/ds", config)
    try:
        one = [(i.key, i.etag, i.size) for i in store.list()]
        for workers, depth in ((2, 1), (2, 3), (8, 3), (3, 2)):
            assert [
                (i.key, i.etag, i.size) for i in parallel_list(store, workers=workers, max_depth=depth)
            ] == one
    finally:
        store.close()


def test_sub_prefixes_are_listed_at_the_same_time(bucket) -> None:
    """Two LISTs of different sub-prefixes must be in flight together: each waits for the
    other at a barrier, which a one-at-a-time listing never reaches (BrokenBarrierError)."""
    config, name = bucket
    store = open_store(f"s3://{name}/ds", config)
    barrier = threading.Barrier(2, timeout=20)
    met: list[str] = []
    real_list = store.list

    def list_meeting(prefix: str = "", start_after: str = ""):
        if prefix in ("a/", "b/"):
            barrier.wait()
            met.append(prefix)
        yield from real_list(prefix, start_after)

    store.list = list_meeting  # type: ignore[method-assign]
    try:
        keys = [i.key for i in parallel_list(store, workers=4, max_depth=1)]
    finally:
        store.close()
    assert sorted(met) == ["a/", "b/"]
    assert keys == [k[len("ds/") :] for k in KEYS]


def test_an_error_in_one_prefix_fails_the_listing(bucket) -> None:
    config, name = bucket
    store = open_store(f"s3://{name}/ds", config)
    real_list = store.list

    def failing(prefix: str = "", start_after: str = ""):
        if prefix == "b/":
            raise OSError("LIST of b/ failed")
        yield from real_list(prefix, start_after)

    store.list = failing  # type: ignore[method-assign]
    try:
        with pytest.raises(OSError, match="b/ failed"):
            list(parallel_list(store, workers=4, max_depth=1))
    finally:
        store.close()


def test_import_of_several_prefixes(bucket) -> None:
    config, name = bucket
    catalog = open_catalog(config.resolved_catalog_url)
    stores = StoreRegistry(config)
    try:
        report = import_source(catalog, config, stores, f"s3://{name}/ds", "ds")
        expected = [k[len("ds/") :] for k in KEYS if not k.endswith("/")]
        assert report.added == len(expected)
        assert [r.key for r in catalog.list_records("ds")] == expected
    finally:
        stores.close()
        catalog.close()
