"""caller33: ``datahub pack`` of a bucket snapshot makes no target every pod mounts.

A bucket snapshot (named after its ``source`` bucket URL, no owner, no access list) is open to
no pod (``csi/access.py`` ``bucket_snapshot``). Its pack's target was created with the
source's readers (``readers_of``): none, so no owner and no access list, which the CSI
plugin opens to every pod: any pod mounted the bucket's pictures, resized. The pack is now
refused before anything is made, saying to create the target with its access list first; a
target that exists is packed into as before."""

from __future__ import annotations

import pytest

from csi.access import require as pod_may
from datahub.catalog import Catalog, Put, Record
from datahub.config import Config
from datahub.errors import AccessDenied, DatasetNotFound
from datahub.pack import PackSpec, start_job
from datahub.tasks import open_task_queue

POD = "system:serviceaccount:team-b:trainer"
SNAPSHOT = "s3.bench.train"


def _snapshot(catalog: Catalog) -> None:
    catalog.create_dataset(SNAPSHOT, description="snapshots of s3://bench/train", source="s3://bench/train")
    catalog.commit(
        SNAPSHOT, [Put(Record(f"p{i}.jpg", f"s3://bench/train/p{i}.jpg", "e", 10)) for i in range(3)]
    )


def _pack(config: Config, catalog: Catalog) -> None:
    queue = open_task_queue(config.resolved_catalog_url)
    try:
        start_job(catalog, queue, SNAPSHOT, "out", PackSpec.parse(resize="shorter=40"))
    finally:
        queue.close()


def test_a_pack_of_a_bucket_snapshot_makes_no_target_every_pod_mounts(
    config: Config, catalog: Catalog
) -> None:
    _snapshot(catalog)
    with pytest.raises(AccessDenied) as refused:
        _pack(config, catalog)
    assert SNAPSHOT in refused.value.message and "datahub dataset create out" in refused.value.message
    with pytest.raises(DatasetNotFound):
        catalog.get_dataset("out")


def test_a_pack_of_a_bucket_snapshot_into_a_target_made_first_keeps_its_access(
    config: Config, catalog: Catalog
) -> None:
    _snapshot(catalog)
    catalog.create_dataset("out", acl={"system:serviceaccount:team-a:trainer": "reader"})
    _pack(config, catalog)
    with pytest.raises(AccessDenied):
        pod_may(catalog.get_dataset("out"), POD, "reader")
