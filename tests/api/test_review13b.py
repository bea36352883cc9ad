"""review13b: the bucket-snapshot names over HTTP (datahub/api/access.py ``snapshot_name``,
the remote store's ``mount_made``), tried with the names and sources a token could send."""

from __future__ import annotations

import pytest

from datahub.errors import DatasetNotFound
from fuse_adapter.bucket_listing import foreign_snapshot
from fuse_adapter.layout import snapshot_dataset_name
from tests.api.conftest import Api

MOUNT = "s3://platform/team-b"  # the bucket prefix a tenant's mount lists
NAME = snapshot_dataset_name(MOUNT)


@pytest.mark.parametrize("name", ["S3.platform.team-b", "s3", "s3-.platform.team-b", "ｓ3.platform.team-b"])
def test_a_name_a_token_may_create_is_never_the_one_a_mount_commits_into(api: Api, name: str) -> None:
    """Names near a snapshot's (another case, no dot, a lookalike letter): refused, or a
    dataset of their own that leaves the mount's name free."""
    for path in ("/v1/datasets", "/v1/remote/datasets"):
        resp = api.post(path, "eve", json={"name": name})
        assert resp.status_code in (201, 400, 403, 409, 422), resp.text
    with pytest.raises(DatasetNotFound):
        api.catalog.get_dataset(NAME)


def test_a_token_cannot_make_a_snapshot_whose_source_another_prefix_is(api: Api) -> None:
    squat = api.post("/v1/remote/datasets", "eve", json={"name": NAME, "source": "s3://eve-bucket/x"})
    assert squat.status_code == 403, squat.text
    made = api.post("/v1/remote/datasets", "eve", json={"name": NAME, "source": MOUNT})
    assert made.status_code == 201, made.text
    assert foreign_snapshot(api.catalog.get_dataset(NAME), MOUNT) == ""
