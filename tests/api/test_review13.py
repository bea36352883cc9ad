"""Adversarial cases of the Record URLs rule (urlrule13), review13.

A platform blob (``<objects_url>/blobs/sha256/<ab>/<cd>/<hash>``) is named by its content, so
the rule lets any writer record one. But ``commit_workspace`` trusts a head record that points
at a blob by its *checksum* (``datahub.workspaces._head_blobs``: an unchanged file keeps the
record whose ``(checksum, size)`` it has, without reading anything), and the rule never looked
at the checksum a put claims. A writer could put a record naming its own blob with the
checksum of another file of the dataset (every reader sees the checksums), or re-put an
existing blob record (same URL, etag and size: a "label edit") with another file's checksum;
the next workspace commit of that file then pointed it at the writer's bytes. Wrong bytes,
under another user's file, until someone noticed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from datahub.catalog.model import Put, Record
from tests.api.conftest import Api, api_for
from tests.api.test_record_urls import BUCKET, commit, put, remote_commit

H1 = "ab" + "cd" + "1" * 60  # the writer's own blob
H2 = "ef" + "01" + "2" * 60  # another file of the dataset (its checksum is visible to readers)


@pytest.fixture
def api(config) -> Iterator[Api]:
    """pets: owner's; alice reads, bob writes. The platform's objects under s3://platform/objects."""
    config.objects_url = f"{BUCKET}/objects"
    with api_for(config) as api:
        yield api


def blob(digest: str) -> str:
    return f"{BUCKET}/objects/blobs/sha256/{digest[:2]}/{digest[2:4]}/{digest}"


def refused_checksum(resp, key: str) -> None:
    assert resp.status_code == 403, resp.text
    error = resp.json()["error"]
    assert error["code"] == "access_denied" and error["details"]["key"] == key, error
    assert "checksum" in error["message"]


def test_a_blob_record_must_carry_the_blobs_own_checksum(api: Api) -> None:
    forged = put("zzz", blob(H1), "e1", 100, checksum=f"sha256:{H2}")
    refused_checksum(commit(api, "pets", "bob", forged), "zzz")
    refused_checksum(remote_commit(api, "pets", "bob", forged), "zzz")
    # its own hash, another algorithm's name, or none: the blob is what its name says
    for i, checksum in enumerate((f"sha256:{H1}", "")):
        assert (
            commit(api, "pets", "bob", put(f"ok{i}", blob(H1), "e1", 100, checksum=checksum)).status_code
            == 201
        )


def test_a_label_edit_cannot_change_a_blob_records_checksum(api: Api) -> None:
    """The same key, URL, etag and size proves the caller may read the record, not that the
    checksum it now claims is the blob's."""
    api.catalog.commit(
        "pets", [Put(Record("model/a.bin", blob(H1), "e1", 100, f"sha256:{H1}"))], message="a blob"
    )
    relabel = put("model/a.bin", blob(H1), "e1", 100, checksum=f"sha256:{H1}", labels={"k": "v"})
    assert commit(api, "pets", "bob", relabel).status_code == 201
    forged = put("model/a.bin", blob(H1), "e1", 100, checksum=f"sha256:{H2}")
    refused_checksum(commit(api, "pets", "bob", forged), "model/a.bin")


def test_a_url_under_the_blob_prefix_that_is_no_blob_carries_no_checksum(api: Api) -> None:
    """A source (or a re-put) may allow a URL under ``<objects_url>/blobs/`` that is not a blob
    the platform names; ``commit_workspace`` would still trust its checksum."""
    api.patch("/v1/datasets/pets", json={"sources": [f"{BUCKET}/objects/"]})
    odd = f"{BUCKET}/objects/blobs/sha256/ab/cd/{H1}.x"
    refused_checksum(commit(api, "pets", "bob", put("odd", odd, "e1", 100, checksum=f"sha256:{H2}")), "odd")
    assert commit(api, "pets", "bob", put("odd", odd, "e1", 100)).status_code == 201
