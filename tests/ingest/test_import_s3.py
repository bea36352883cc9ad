"""Importing an S3 prefix from real S3 servers (moto and Ceph RGW), by reference and with --copy."""

from __future__ import annotations

import json

import pytest

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.ingest import import_source
from datahub.storage import StoreRegistry


@pytest.fixture
def s3_setup(tmp_path, s3_endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **s3_endpoint.s3_config_overrides()}
    )
    config.home_path.mkdir(parents=True)
    catalog = open_catalog(config.resolved_catalog_url)
    stores = StoreRegistry(config)
    bucket = s3_endpoint.new_bucket("ingest")
    client = s3_endpoint.client()
    for key, body in {
        "ds/train/a.jpg": b"aaa",
        "ds/train/b.jpg": b"bbbb",
        "ds/val/c.jpg": b"c",
        "other/x": b"x",
        "ds/val/": b"",  # a console-made "folder" marker: skipped, not an invalid key
    }.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    try:
        yield config, catalog, stores, client, bucket
    finally:
        stores.close()
        catalog.close()


def test_import_prefix_by_reference_keeps_s3_etags(s3_setup):
    config, catalog, stores, client, bucket = s3_setup
    report = import_source(catalog, config, stores, f"s3://{bucket}/ds", "ds")
    assert report.added == 3
    records = {r.key: r for r in catalog.list_records("ds")}
    assert sorted(records) == ["train/a.jpg", "train/b.jpg", "val/c.jpg"]
    head = client.head_object(Bucket=bucket, Key="ds/train/b.jpg")
    assert records["train/b.jpg"].etag == head["ETag"].strip('"')
    assert records["train/b.jpg"].url == f"s3://{bucket}/ds/train/b.jpg"
    store, key = stores.for_url(records["train/b.jpg"].url)
    assert store.read(key, etag=records["train/b.jpg"].etag) == b"bbbb"


def test_reimport_of_updated_prefix_commits_only_changes(s3_setup):
    config, catalog, stores, client, bucket = s3_setup
    import_source(catalog, config, stores, f"s3://{bucket}/ds/", "ds")
    assert import_source(catalog, config, stores, f"s3://{bucket}/ds/", "ds").version is None
    client.put_object(Bucket=bucket, Key="ds/train/a.jpg", Body=b"AAA")  # same size, new etag
    client.delete_object(Bucket=bucket, Key="ds/val/c.jpg")
    client.put_object(Bucket=bucket, Key="ds/val/d.jpg", Body=b"dd")
    report = import_source(catalog, config, stores, f"s3://{bucket}/ds/", "ds")
    assert (report.version.seq, report.added, report.removed, report.modified) == (2, 1, 1, 1)


def test_copy_from_s3_into_the_managed_prefix(s3_setup):
    config, catalog, stores, client, bucket = s3_setup
    import_source(catalog, config, stores, f"s3://{bucket}/ds", "ds", copy=True)
    client.delete_object(Bucket=bucket, Key="ds/train/b.jpg")  # the copy must not need the source
    record = catalog.get_record("ds", "latest", "train/b.jpg")
    assert record.url.startswith(config.resolved_objects_url)
    store, key = stores.for_url(record.url)
    assert store.read(key, etag=record.etag) == b"bbbb"
    assert record.meta["_source"]["url"] == f"s3://{bucket}/ds/train/b.jpg"


def test_manifest_of_s3_urls(tmp_path, s3_setup):
    config, catalog, stores, client, bucket = s3_setup
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        f"s3://{bucket}/ds/train/a.jpg\n"
        + json.dumps({"url": f"s3://{bucket}/ds/val/c.jpg", "labels": {"class": "c"}})
        + "\n"
    )
    import_source(catalog, config, stores, str(manifest), "ds")
    assert [(r.key, dict(r.labels)) for r in catalog.list_records("ds")] == [
        ("train/a.jpg", {}),
        ("val/c.jpg", {"class": "c"}),
    ]
