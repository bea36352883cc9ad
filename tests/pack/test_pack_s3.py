"""Pack into a real S3 endpoint (moto and Ceph RGW) and train-read the shards back through the cache."""

from __future__ import annotations

from pathlib import Path

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.pack import PackSpec, pack
from datahub.torch import CacheSource, PackedDataset
from tests.pack.conftest import import_manifest, write_source
from tests.servers import S3Endpoint


def test_pack_uploads_shards_to_s3_and_packed_dataset_reads_them(
    s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
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
    assert all(r.url.startswith(f"s3://{bucket}/managed/packs/{result.job}/") for r in records)
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
