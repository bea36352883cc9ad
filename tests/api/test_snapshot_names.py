"""Bucket snapshot names are global admins' to create over HTTP (docs/api.md, "Access lists").

The defect: a bucket mount (``datahub mount s3://b/p``, a CSI bucket volume) lists the bucket
with its own credentials and commits the listing into dataset ``s3.b.p``, the one that
already has that name included. Any token could create that dataset first (``POST
/v1/datasets``, the remote store's create, a derive or a LabelX commit into a new dataset) and
own it: the next mount of another tenant's bucket then committed its keys, etags and sizes
into the token's dataset, and its owner read the objects through the platform's own
credentials (a CSI dataset volume of it, the browser's thumbnails). ``tests/csi/test_grants.py``
shows the mount committing into such a dataset.
"""

from __future__ import annotations

import pytest

from datahub.errors import DatasetNotFound
from tests.api.conftest import Api

RESERVED = ["s3.platform.team-b", "s3.platform", "memory.space.x", "file.data", "rados.pool"]


def _refused(resp, name: str) -> None:
    assert resp.status_code == 403, resp.text
    error = resp.json()["error"]
    assert error["code"] == "access_denied" and error["details"]["dataset"] == name
    assert "reserved for the snapshots bucket mounts record" in error["message"]
    assert "only a global admin may create it" in error["message"]


def _missing(api: Api, name: str) -> bool:
    with pytest.raises(DatasetNotFound):
        api.catalog.get_dataset(name)
    return True


@pytest.mark.parametrize("name", RESERVED)
def test_a_token_cannot_create_a_dataset_a_bucket_mount_would_commit_its_listing_into(
    api: Api, name: str
) -> None:
    _refused(api.post("/v1/datasets", "eve", json={"name": name}), name)
    _refused(api.post("/v1/remote/datasets", "eve", json={"name": name}), name)
    assert _missing(api, name)


def test_a_node_makes_a_snapshot_through_the_remote_store_as_a_mount_does_owned_by_nobody(api: Api) -> None:
    """A node's bucket mount creates its snapshot through the remote store (no owner, no access
    list, the bucket's URL as source), with whatever token the node holds: it is made so,
    and the caller holds no role on it, so a token that made it first reads nothing a mount
    commits into it."""
    name, source = "s3.platform.team-b", "s3://platform/team-b"
    for taken in (
        {"owner": "eve"},
        {"acl": {"eve": "reader"}},
        {"source": "S3://platform/team-b"},
        {"source": ""},
    ):
        _refused(api.post("/v1/remote/datasets", "eve", json={"name": name, "source": source, **taken}), name)
    made = api.post("/v1/remote/datasets", "eve", json={"name": name, "source": source})
    assert made.status_code == 201, made.text
    dataset = api.catalog.get_dataset(name)
    assert (dataset.owner, dataset.acl, dataset.source) == ("", {}, source)
    assert api.get(f"/v1/datasets/{name}", "eve").status_code == 404
    assert name not in [d["name"] for d in api.get("/v1/datasets", "eve").json()]


def test_a_node_with_an_admin_token_makes_its_snapshot_owned_by_nobody_too(api: Api) -> None:
    """snapshot13: a mount commits only into a snapshot shaped as mounts make it (no owner),
    and the remote store gave an admin's token one owned by its principal, so a node holding
    an admin token (docs/kubernetes.md offers one) recorded no snapshot at all."""
    name, source = "s3.platform.team-c", "s3://platform/team-c"
    made = api.post("/v1/remote/datasets", "admin", json={"name": name, "source": source})
    assert made.status_code == 201, made.text
    dataset = api.catalog.get_dataset(name)
    assert (dataset.owner, dataset.acl, dataset.source) == ("", {}, source)


def test_other_names_with_dots_stay_anyones_and_admins_create_snapshot_names(api: Api) -> None:
    for name in ("s3-results", "s3x.train", "results.s3", "files.v2"):
        assert api.post("/v1/datasets", "eve", json={"name": name}).status_code == 201, name
    made = api.post("/v1/datasets", "admin", json={"name": "s3.platform.team-b"})
    assert made.status_code == 201, made.text
    assert api.catalog.get_dataset("s3.platform.team-b").owner == "root"


def test_a_derive_cannot_create_a_snapshot_name_but_writes_one_it_was_granted(api: Api) -> None:
    body = {"where": "labels.class=cat", "to_dataset": "s3.platform.team-b"}
    _refused(api.post("/v1/datasets/pets/versions/1/derive", "alice", json=body), "s3.platform.team-b")
    assert _missing(api, "s3.platform.team-b")
    # an existing one is written as any dataset is: with the writer role a global admin granted
    api.catalog.create_dataset("s3.platform.shared", acl={"alice": "writer"})
    body["to_dataset"] = "s3.platform.shared"
    made = api.post("/v1/datasets/pets/versions/1/derive", "alice", json=body)
    assert made.status_code == 201, made.text
    assert api.catalog.get_dataset("s3.platform.shared").owner == ""  # still nobody's
