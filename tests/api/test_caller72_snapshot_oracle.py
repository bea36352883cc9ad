"""caller72: the remote store's mount-shaped create is no existence oracle.

``POST /v1/remote/datasets`` makes a bucket snapshot's dataset for any token when asked as a
mount asks (no owner, no access list, the bucket's URL as source: docs/api.md, "Access
lists"). It answered 201 for a name nobody had and 409 ``already_exists`` for a taken one, so
any token learned, name by name, which bucket prefixes had been mounted (their snapshots) or
squatted, though every other route answers a dataset the caller may not read as a missing one
("403 or 404"). Now a caller who may not read the dataset there gets the answer of a name
nobody had: the same status and the same body (only what it sent, no owner, no versions);
nothing of that dataset changes. A caller who may read it still gets the 409.
"""

from __future__ import annotations

from datahub.catalog.model import Put
from tests.api.conftest import Api, record


def _ask(api: Api, who: str, name: str, source: str):
    return api.post("/v1/remote/datasets", who, json={"name": name, "source": source})


def _shown(answer) -> dict:
    body = dict(answer.json())
    body.pop("created_at")  # a clock reading: the made one's and the hidden one's differ anyway
    return {"status": answer.status_code, **body}


def test_a_taken_snapshot_name_answers_a_token_without_read_rights_as_a_free_one(api: Api) -> None:
    # another node's mount made this one, and recorded a listing into it
    mounted, mounted_src = "s3.platform.team-a", "s3://platform/team-a"
    assert _ask(api, "alice", mounted, mounted_src).status_code == 201
    api.catalog.commit(mounted, [Put(record("a.jpg"))], message="snapshot", author="node")
    # and a global admin made this one for a tenant, with an owner and readers
    owned, owned_src = "s3.platform.team-c", "s3://platform/team-c"
    api.catalog.create_dataset(owned, source=owned_src, owner="carol", acl={"dave": "reader"})
    before = {n: (api.catalog.get_dataset(n), api.catalog.store.head(n)) for n in (mounted, owned)}

    free = _ask(api, "eve", "s3.platform.team-free", "s3://platform/team-free")
    assert free.status_code == 201, free.text
    for name, source in ((mounted, mounted_src), (owned, owned_src)):
        taken = _ask(api, "eve", name, source)
        assert taken.status_code == 201, taken.text  # was 409 already_exists: the name is taken
        assert _shown(taken) == {**_shown(free), "name": name, "source": source}, taken.text
        assert "carol" not in taken.text and "dave" not in taken.text
        # nothing of the dataset there changed, and eve still reads nothing of it
        assert (api.catalog.get_dataset(name), api.catalog.store.head(name)) == before[name]
        assert api.get(f"/v1/datasets/{name}", "eve").status_code == 404


def test_a_caller_who_may_read_the_snapshot_still_hears_it_is_taken(api: Api) -> None:
    name, source = "s3.platform.team-d", "s3://platform/team-d"
    api.catalog.create_dataset(name, source=source, acl={"alice": "reader"})
    for who in ("alice", "admin"):
        taken = _ask(api, who, name, source)
        assert taken.status_code == 409 and taken.json()["error"]["code"] == "already_exists", taken.text
