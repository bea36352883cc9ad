"""caller33: a copy of a bucket snapshot made with no owner is never open to every pod.

A bucket snapshot (a dataset named after its ``source`` bucket URL, made by a mount with no
owner and no access list) is open to no pod (``csi/access.py`` ``bucket_snapshot``): its
records name the bucket's objects, which the plugin reads with its own credentials. A derive
with no owner (the CLI's, on the deployment's catalog) gave its new target the source's
readers (``readers_of``): none, so the target had no owner and no access list, the very
shape the CSI plugin opens to every pod, and any pod mounted the subset of the bucket.
(``datahub pack`` is checked likewise in ``tests/pack/test_caller33_snapshot_pack.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from csi.access import require as pod_may
from datahub.catalog import Catalog, Put, Record
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import AccessDenied, DatasetNotFound

POD = "system:serviceaccount:team-b:trainer"
SNAPSHOT = "s3.bench.train"


@pytest.fixture
def catalog(tmp_path: Path):
    with Catalog(SQLiteCatalogStore(tmp_path / "c.db")) as cat:
        # as a bucket mount records its listing (fuse_adapter.layout.bucket_view)
        cat.create_dataset(SNAPSHOT, description="snapshots of s3://bench/train", source="s3://bench/train")
        cat.commit(SNAPSHOT, [Put(Record(f"{c}/{i}.jpg", f"s3://bench/train/{c}/{i}.jpg", "e", 1,
                                         labels={"class": c})) for c in ("cat", "dog") for i in range(2)])  # fmt: skip
        yield cat


def test_no_pod_mounts_a_bucket_snapshot(catalog: Catalog) -> None:
    with pytest.raises(AccessDenied):
        pod_may(catalog.get_dataset(SNAPSHOT), POD, "reader")


def test_a_cli_derive_of_a_bucket_snapshot_makes_no_dataset_every_pod_mounts(catalog: Catalog) -> None:
    with pytest.raises(AccessDenied) as refused:
        catalog.derive(SNAPSHOT, None, "labels.class=cat", to_dataset="cats")
    # it says why and what to do, naming both datasets
    assert SNAPSHOT in refused.value.message and "cats" in refused.value.message
    assert "datahub dataset create cats" in refused.value.message
    with pytest.raises(DatasetNotFound):
        catalog.get_dataset("cats")  # nothing made


def test_a_derive_of_a_bucket_snapshot_into_a_target_with_its_access_list_works(catalog: Catalog) -> None:
    catalog.create_dataset("cats", acl={"system:serviceaccount:team-a:trainer": "reader"})
    catalog.derive(SNAPSHOT, None, "labels.class=cat", to_dataset="cats")
    with pytest.raises(AccessDenied):
        pod_may(catalog.get_dataset("cats"), POD, "reader")
    assert [r.key for r in catalog.list_records("cats")] == ["cat/0.jpg", "cat/1.jpg"]


def test_a_derive_with_an_owner_of_a_bucket_snapshot_still_makes_the_owners_dataset(catalog: Catalog) -> None:
    catalog.derive(SNAPSHOT, None, "labels.class=cat", to_dataset="cats", owner="carol")
    cats = catalog.get_dataset("cats")
    assert cats.owner == "carol" and cats.acl == {}
    with pytest.raises(AccessDenied):
        pod_may(cats, POD, "reader")
