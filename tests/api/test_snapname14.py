"""snapname14: a token cannot take a bucket's snapshot name through another URL of that name.

The remote store makes a snapshot for any token when the request is shaped as a mount's and
the source is a URL the name is made from (``mount_made``). ``s3://platform/Team-B`` was such
a URL of ``s3.platform.team-b``: the token's snapshot of it then made every mount of
``s3://platform/team-b`` find a foreign snapshot and record nothing.
"""

from __future__ import annotations

import pytest

from datahub.catalog.snapshots import snapshot_dataset_name
from datahub.errors import DatasetNotFound
from fuse_adapter.bucket_listing import foreign_snapshot
from tests.api.conftest import Api

VICTIM = "s3://platform/team-b"
LONG = "s3://platform/" + "x" * 70


def _long_read_back() -> str:
    """The URL the long victim's name reads as (dots to slashes): before, a plain URL whose
    name was exactly the victim's."""
    return "s3://" + snapshot_dataset_name(LONG).partition(".")[2].replace(".", "/")


@pytest.mark.parametrize(
    ("victim", "squat"),
    [
        (VICTIM, "s3://platform/Team-B"),
        (VICTIM, "s3://platform.team-b"),
        (VICTIM, "s3://platform/team b"),
        (VICTIM, "s3://platform//team-b"),
        (LONG, _long_read_back()),
    ],
)
def test_a_token_cannot_make_a_buckets_snapshot_with_another_url_of_its_name(
    api: Api, victim: str, squat: str
) -> None:
    name = snapshot_dataset_name(victim)
    refused = api.post("/v1/remote/datasets", "eve", json={"name": name, "source": squat})
    assert refused.status_code == 403, refused.text
    with pytest.raises(DatasetNotFound):
        api.catalog.get_dataset(name)
    # the squat URL's own snapshot is made as a mount makes it, under a name of its own
    own = api.post("/v1/remote/datasets", "eve", json={"name": snapshot_dataset_name(squat), "source": squat})
    assert own.status_code == 201, own.text
    assert own.json()["name"] != name
    # and the victim's mount still makes and records into its own
    made = api.post("/v1/remote/datasets", "bob", json={"name": name, "source": victim})
    assert made.status_code == 201, made.text
    assert foreign_snapshot(api.catalog.get_dataset(name), victim) == ""
