"""review36 (guard): a pack job stopped between shards and resumed commits every source image
once, each sample the bytes ``transform_image`` makes of its source record, in shards whose
recorded checksum is their object's."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.pack import PackSpec, pack, start_job, work
from datahub.pack.image import transform_image
from datahub.pack.worker import PackServices
from datahub.storage import StoreRegistry
from datahub.tasks import DONE, TODO, open_task_queue
from datahub.torch.sources import CacheSource
from tests.pack.conftest import import_manifest, write_source


def test_a_job_stopped_between_shards_and_resumed_packs_each_image_once(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 5), "photos")
    spec = PackSpec.parse(resize="shorter=40", shard_size="1B")  # five tasks, one photo each
    queue = open_task_queue(config.resolved_catalog_url)
    job = start_job(catalog, queue, "photos", "out", spec).job
    stop, packed_samples = threading.Event(), []

    def on_sample(n: int) -> None:
        packed_samples.append(n)
        if len(packed_samples) == 2:
            stop.set()  # the worker finishes this shard, then leaves: between two tasks

    services = PackServices.open(config)
    try:
        work(services, job, stop=stop, on_sample=on_sample)
    finally:
        services.close()
    states = sorted(t.state for t in queue.tasks(job))
    assert states.count(DONE) == 2 and states.count(TODO) == 3, states
    queue.close()

    result = pack(config, catalog, "photos", "out", spec, workers=0)
    assert (result.shards, result.samples) == (5, 5)

    with StoreRegistry(config) as stores:
        for record in catalog.list_records("out", None, prefix="shards/"):
            store, key = stores.for_url(record.url)
            assert (
                record.checksum == "sha256:" + hashlib.sha256(store.read(key, etag=record.etag)).hexdigest()
            )
        from datahub.torch.datasets import PackedDataset  # torch: not at collection (collect21)

        source = CacheSource(config)
        try:
            packed = PackedDataset.open(catalog, source, "out", cache_dir=tmp_path / "shards",
                                        transform=lambda data, labels: (bytes(data), dict(labels)))  # fmt: skip
            samples = {packed.locate(i)[1]: packed[i] for i in range(len(packed))}
            assert len(samples) == len(packed) == 5
            for record in catalog.list_records("photos", None):
                store, key = stores.for_url(record.url)
                want = transform_image(store.read(key, etag=record.etag), spec.transform, key=record.key).data
                assert samples[record.key] == (want, dict(record.labels))
        finally:
            source.close()
