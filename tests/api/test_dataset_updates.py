"""Issue 12 item 2: PATCH writes only the fields sent, atomically, and honours If-Match."""

from __future__ import annotations

import threading

from tests.api.conftest import Api


def test_a_description_edit_racing_an_acl_revocation_never_restores_the_revoked_admin(api: Api):
    """Before: update_dataset read, merged and wrote back every field, so the description edit
    could write back the ACL it read before the revocation (42 of 100 trials)."""
    for trial in range(40):
        api.catalog.update_dataset("pets", acl={"eve": "admin", "alice": "reader"})
        barrier = threading.Barrier(2)
        answers: dict[str, int] = {}

        def patch(what: str, body: dict, barrier=barrier, answers=answers) -> None:
            barrier.wait()
            answers[what] = api.patch("/v1/datasets/pets", who="owner", json=body).status_code

        threads = [
            threading.Thread(target=patch, args=("edit", {"description": f"d{trial}"})),
            threading.Thread(target=patch, args=("revoke", {"acl": {"alice": "reader"}})),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == {"edit": 200, "revoke": 200}
        final = api.get("/v1/datasets/pets", who="owner").json()
        assert final["acl"] == {"alice": "reader"}, trial  # the revoked admin never comes back
        assert final["description"] == f"d{trial}", trial  # and the edit is not lost either
        assert api.get("/v1/datasets/pets", who="eve").status_code == 404


def test_get_returns_the_revision_as_field_and_etag(api: Api):
    r = api.get("/v1/datasets/pets", who="alice")
    assert r.json()["revision"] == 0 and r.headers["etag"] == '"r0"'
    r = api.patch("/v1/datasets/pets", who="owner", json={"description": "x"})
    assert r.json()["revision"] == 1 and r.headers["etag"] == '"r1"'
    assert api.get("/v1/datasets/pets").headers["etag"] == '"r1"'


def test_patch_with_a_stale_if_match_is_412_and_changes_nothing(api: Api):
    etag = api.get("/v1/datasets/pets", who="owner").headers["etag"]
    ok = api.client.patch(
        "/v1/datasets/pets", headers={**api.as_("owner"), "If-Match": etag}, json={"acl": {"bob": "writer"}}
    )
    assert ok.status_code == 200 and ok.json()["acl"] == {"bob": "writer"}
    stale = api.client.patch(
        "/v1/datasets/pets",
        headers={**api.as_("owner"), "If-Match": etag},
        json={"acl": {"bob": "writer", "alice": "admin"}},
    )
    assert stale.status_code == 412
    err = stale.json()["error"]
    assert err["code"] == "precondition_failed"
    assert "'pets' is at revision 1, not 0" in err["message"]
    assert err["details"] == {"dataset": "pets", "revision": 1}
    assert api.catalog.get_dataset("pets").acl == {"bob": "writer"}
    for header in ('W/"r1"', '"1"', "garbage"):  # If-Match compares strongly: no match, 412
        r = api.client.patch(
            "/v1/datasets/pets", headers={**api.as_("owner"), "If-Match": header}, json={"description": "y"}
        )
        assert r.status_code == 412, header
    r = api.client.patch(
        "/v1/datasets/pets", headers={**api.as_("owner"), "If-Match": '"r1", "r2"'}, json={"description": "y"}
    )
    assert r.status_code == 400
    assert api.catalog.get_dataset("pets").description == ""
    r = api.client.patch(
        "/v1/datasets/pets", headers={**api.as_("owner"), "If-Match": "*"}, json={"description": "y"}
    )
    assert r.status_code == 200 and r.headers["etag"] == '"r2"'


def test_if_match_is_checked_after_access(api: Api):
    """A caller who may not read the dataset learns nothing from If-Match either."""
    r = api.client.patch(
        "/v1/datasets/pets", headers={**api.as_("eve"), "If-Match": '"r9"'}, json={"description": "y"}
    )
    assert r.status_code == 404
