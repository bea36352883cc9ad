"""What a version's lineage says about a source dataset the caller may not read.

``pets`` (the fixture's dataset: alice reads it, eve has no role) is the source of three
versions of ``made``, a dataset eve may read and write: a derive, a LabelX export and a pack,
each naming ``pets@v1`` in its lineage (and the derive and the pack in their message). A
missing dataset and one the caller may not read give the same 404 everywhere, so the lineage
must not name it to eve either: every route that answers a version shows her the lineage's
kind and details with the source ``null`` and ``(hidden dataset)`` in the message, while alice
(who may read pets) and admins see it as committed (the remote store's contract).
"""

from __future__ import annotations

import json

import pytest

from datahub.catalog.model import Put
from tests.api.conftest import Api, record

LABELX = {"source": "labelx", "project": "review", "project_id": 3, "from": "pets@v1", "changed": 2}
PACK = {
    "kind": "pack",
    "source": "pets@v1",
    "source_dataset": "pets",
    "source_version": 1,
    "params": {"transform": {"resize": "8x8"}},
    "job": "pack-0123456789abcdef",
    "samples": 3,
}


@pytest.fixture
def made(api: Api) -> Api:
    catalog = api.catalog
    catalog.derive("pets", 1, "labels.class=cat", to_dataset="made", owner="owner")  # v1
    catalog.update_dataset("made", acl={"eve": "writer", "alice": "reader"})
    catalog.commit(
        "made", [Put(record("x/1.jpg"))], base=1, message="labels from LabelX project review", lineage=LABELX
    )
    catalog.commit("made", [Put(record("x/2.jpg"))], base=2, message="pack pets@v1", lineage=PACK)
    return api


def _versions(api: Api, who: str) -> dict[str, list[dict]]:
    """Every answer that carries the versions of ``made``, by route."""
    remote = api.get("/v1/remote/datasets/made/versions", who=who)
    assert remote.status_code == 200, remote.text
    lines = [json.loads(line) for line in remote.text.splitlines()]
    answers = {
        "log": api.get("/v1/datasets/made/versions", who=who).json(),
        "by ref": [api.get(f"/v1/datasets/made/versions/{seq}", who=who).json() for seq in (3, 2, 1)],
        "remote log": [line for line in lines if "seq" in line],
        "remote by seq": [
            api.get(f"/v1/remote/datasets/made/versions/{seq}", who=who).json() for seq in (3, 2, 1)
        ],
    }
    if who == "eve":  # the writer's routes answer a version too
        answers["tag"] = [
            api.put("/v1/datasets/made/tags/t1", who=who, json={"ref": seq}).json() for seq in (3, 2, 1)
        ]
        answers["remote tag"] = answers["remote by seq"]
    return answers


def test_a_caller_who_may_not_read_the_source_sees_how_but_not_from_what(made: Api) -> None:
    assert made.get("/v1/datasets/pets", who="eve").status_code == 404  # eve may not read pets
    for route, versions in _versions(made, "eve").items():
        pack, labelx, derive = versions
        assert "pets" not in json.dumps(versions), route
        assert derive["lineage"] == {"derived_from": None, "filter": "labels.class=cat"}, route
        assert derive["message"] == "derive (hidden dataset) where labels.class=cat", route
        assert labelx["lineage"] == {**LABELX, "from": None}, route
        assert pack["lineage"] == {
            **PACK,
            "source": None,
            "source_dataset": None,
            "source_version": None,
            "job": None,
        }, route
        assert pack["message"] == "pack (hidden dataset)", route


@pytest.mark.parametrize("who", ["alice", "admin"])
def test_a_caller_who_may_read_the_source_sees_the_lineage_as_committed(made: Api, who: str) -> None:
    for route, (pack, labelx, derive) in _versions(made, who).items():
        assert derive["lineage"] == {"derived_from": "pets@v1", "filter": "labels.class=cat"}, route
        assert derive["message"] == "derive pets@v1 where labels.class=cat", route
        assert labelx["lineage"] == LABELX, route
        assert (pack["lineage"], pack["message"]) == (PACK, "pack pets@v1"), route


def test_a_lineage_cannot_probe_which_names_exist(made: Api) -> None:
    """A writer may commit any lineage through the remote store; read back, a name that exists
    but that it may not read and a name that does not exist must look alike."""
    answers = []
    for base, source in ((3, "pets@v1"), (4, "nosuch@v1")):
        header = {"base": base, "message": "", "commit_id": f"c{base}", "lineage": {"derived_from": source}}
        body = (
            json.dumps(header)
            + "\n"
            + json.dumps({"op": "delete", "key": "x/1.jpg" if base == 3 else "x/2.jpg"})
        )
        r = made.post("/v1/remote/datasets/made/commits", who="eve", content=body)
        assert r.status_code == 201, r.text
        answers.append(r.json()["lineage"])
        answers.append(made.get(f"/v1/datasets/made/versions/{base + 1}", who="eve").json()["lineage"])
    assert answers == [{"derived_from": None}] * 4
