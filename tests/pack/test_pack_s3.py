"""Pack into a real S3 endpoint (moto and Ceph RGW) and train-read the shards back through the cache."""

from __future__ import annotations

from pathlib import Path

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.pack import PackSpec, pack, worker
from datahub.pack.job import objects_dir
from datahub.tasks import open_task_queue
from datahub.torch import CacheSource  # no torch here: the test imports PackedDataset
from tests.faults import FlakyProxy
from tests.pack.conftest import import_manifest, write_source
from tests.servers import S3Endpoint


def test_pack_uploads_shards_to_s3_and_packed_dataset_reads_them(
    s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    from datahub.torch import PackedDataset

    bucket = s3_endpoint.new_bucket("pack")
    config = load_config(
        env={},
        overrides={"home": str(tmp_path / "var"), "objects_url": f"s3://{bucket}/managed",
                   **s3_endpoint.s3_config_overrides()},
    )  # fmt: skip
    catalog = open_catalog(config.resolved_catalog_url)
    import_manifest(catalog, config, write_source(tmp_path / "src", 5), "photos")
    result = pack(
        config, catalog, "photos", "photos-s3", PackSpec.parse(resize="40x40", shard_size="30KB"), workers=0
    )
    records = list(catalog.list_records("photos-s3", None))
    assert len(records) == result.shards + 1 >= 3
    queue = open_task_queue(config.resolved_catalog_url)
    folder = objects_dir(result.job, queue.get_job(result.job).meta)  # the job's, not its id
    queue.close()
    assert folder != result.job
    assert all(r.url.startswith(f"s3://{bucket}/managed/packs/{folder}/") for r in records)

    listed = s3_endpoint.client().list_objects_v2(Bucket=bucket, Prefix="managed/packs/")
    assert len(listed["Contents"]) == len(records)  # shards + index, nothing else left behind
    source = CacheSource(config)
    try:
        dataset = PackedDataset.open(catalog, source, "photos-s3", cache_dir=tmp_path / "shards")
    finally:
        source.close()
    image, labels = dataset[3]
    assert tuple(image.shape) == (3, 40, 40) and labels == {"class": 0}
    catalog.close()


def test_a_task_whose_upload_fails_transiently_is_tried_again_not_failed(
    moto_endpoint: S3Endpoint, tmp_path: Path, monkeypatch
) -> None:
    """An origin that refuses uploads for a while (503 past the storage layer's retries) must
    not end the job: each claim counted towards MAX_ATTEMPTS, so three such outages failed it
    for good although no record was bad (the chaos soak, seed 26, docs/reliability.md)."""
    monkeypatch.setattr(worker, "TRANSIENT_BACKOFF", 0.1, raising=False)
    bucket = moto_endpoint.new_bucket("pack-flaky")
    puts = lambda method, path: method == "PUT"  # noqa: E731
    with FlakyProxy(moto_endpoint.url, fail_first=5, status=503, match=puts) as proxy:
        s3 = {**moto_endpoint.s3_config_overrides()["s3"], "endpoint_url": proxy.url, "max_attempts": 2}
        config = load_config(
            env={},
            overrides={"home": str(tmp_path / "var"), "objects_url": f"s3://{bucket}/managed", "s3": s3},
        )
        catalog = open_catalog(config.resolved_catalog_url)
        import_manifest(catalog, config, write_source(tmp_path / "src", 3), "photos")
        result = pack(config, catalog, "photos", "out", PackSpec.parse(resize="40x40"), workers=0)
        assert proxy.failed == 5  # the first shard's upload failed past its retries, then went through
        assert result.samples == 3
        queue = open_task_queue(config.resolved_catalog_url)
        assert all(
            t.attempts == 1 for t in queue.tasks(result.job)
        )  # one claim each: nothing counted as a crash
        queue.close()
        catalog.close()
