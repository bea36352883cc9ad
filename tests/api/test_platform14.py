"""What a platform engineer meets following docs/deployment.md and docs/api.md (platform14).

A token that holds no role on an existing dataset and tries to create it (an import
``--to`` it, a workspace ``--commit-to`` it: the client finds it "missing", as the server
hides it, and creates it) was told ``dataset 'x' already exists; pick another name``. The
user picked no name to create: they meant to write into that dataset, and what they need is a
role on it. The 409 now says that the name is taken by a dataset this token holds no role on,
and what to do (another name, or ask its admins for a role). The 409 itself already told the
caller the name is taken, so the message reveals nothing more. (docs/deployment.md's
``datahub token create <principal>``: tests/cli/test_platform14.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.catalog import Catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import AlreadyExists
from tests.api.conftest import Api
from tests.catalog.remote import serve


def _taken_by_a_hidden_dataset(resp, who: str) -> None:
    assert resp.status_code == 409, resp.text
    error = resp.json()["error"]
    assert error["code"] == "already_exists" and error["details"]["dataset"] == "pets"
    message = error["message"]
    assert f"'{who}' holds no role on it" in message, message
    assert "ask one of its admins" in message and f"--grant {who}=writer" in message, message


@pytest.mark.parametrize("route", ["/v1/datasets", "/v1/remote/datasets"])
def test_creating_a_dataset_the_token_may_not_read_says_it_holds_no_role_there(api: Api, route: str) -> None:
    _taken_by_a_hidden_dataset(api.post(route, "eve", json={"name": "pets"}), "eve")
    assert api.catalog.get_dataset("pets").owner == "owner"  # untouched


def test_a_caller_who_reads_the_dataset_gets_the_plain_answer(api: Api) -> None:
    resp = api.post("/v1/datasets", "alice", json={"name": "pets"})
    assert resp.status_code == 409
    assert "holds no role" not in resp.json()["error"]["message"]


def test_over_the_remote_catalog_a_create_of_a_hidden_dataset_names_the_missing_role(tmp_path: Path) -> None:
    """The path a node takes (an import or a workspace commit creating its target)."""
    server, backing, _ = serve(tmp_path)
    node = issue_token(backing.store, "csi-node")[0]
    backing.create_dataset("results", owner="team-a")
    catalog = Catalog(HttpCatalogStore(server.url, token=node))
    try:
        with pytest.raises(AlreadyExists, match="'csi-node' holds no role on it"):
            catalog.create_dataset("results")
    finally:
        catalog.close()
        server.stop()
        backing.close()


BLOB = "blobs/sha256/ab/cd/abcd" + "0" * 60


@pytest.mark.parametrize("root", ["file:///var/tmp/u/objects", "s3://team-bucket/objects"])
def test_a_blob_pinned_under_another_objects_url_says_to_use_the_servers(api: Api, root: str) -> None:
    """``datahub import DIR --to D --copy`` (or a workspace commit) by a client whose
    ``objects_url`` is not the server's (its default, ``file://<home>/objects``) pins blobs
    the platform does not read: refused, as before, but the message said only that file://
    URLs are for global admins (or to ask for a source prefix), never what the user had to
    change: its ``objects_url``, to the server's."""
    assert api.post("/v1/datasets", "eve", json={"name": "mine"}).status_code == 201
    put = {"op": "put", "record": {"key": "a.txt", "url": f"{root}/{BLOB}", "etag": "e", "size": 3}}
    resp = api.post("/v1/datasets/mine/commits", "eve", json={"changes": [put]})
    assert resp.status_code == 403, resp.text
    message = resp.json()["error"]["message"]
    server = api.config.resolved_objects_url.rstrip("/")
    assert f'objects_url = "{server}"' in message and "DATAHUB_OBJECTS_URL" in message, message
    assert api.catalog.store.head("mine") == 0
