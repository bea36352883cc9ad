"""A derive into an existing ``to_dataset`` the caller may not read (csinode15).

Still 404 ``dataset_not_found`` (promise 5: nothing of a dataset is told to a caller without
a role on it; ``tests/api/test_auth.py`` asserts the status). The message was the one of a
missing dataset, "create it first or check `datahub dataset list`": advice that cannot work
for a target, which a derive creates itself when it is missing. It now says the target is
missing or not visible to the caller, and the two ways on.
"""

from __future__ import annotations

from tests.api.conftest import Api

BODY = {"where": "labels.class=cat"}


def test_the_404_says_missing_or_not_visible_and_what_to_do(api: Api) -> None:
    api.catalog.create_dataset("team-only", owner="owner", acl={"bob": "writer"})
    r = api.post("/v1/datasets/pets/versions/1/derive", who="alice", json={**BODY, "to_dataset": "team-only"})
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert error["code"] == "dataset_not_found" and error["details"] == {"dataset": "team-only"}
    message = error["message"]
    assert "to_dataset 'team-only' is missing or not visible to 'alice'" in message, message
    assert "derive into a new name" in message and "--grant alice=writer" in message, message
    assert "create it first" not in message, message
    assert "owner" not in message and "bob" not in message, message  # nothing of the dataset itself
    assert api.catalog.store.head("team-only") == 0


def test_a_reader_of_the_target_still_hears_the_role_it_needs(api: Api) -> None:
    """Who may read the target learns it exists anyway: 403 naming the role, as before."""
    api.catalog.create_dataset("team-read", owner="owner", acl={"alice": "reader"})
    r = api.post("/v1/datasets/pets/versions/1/derive", who="alice", json={**BODY, "to_dataset": "team-read"})
    assert r.status_code == 403, r.text
    assert "'alice' needs the writer role on dataset 'team-read'" in r.json()["error"]["message"]


def test_a_hidden_source_keeps_the_plain_message_of_a_missing_dataset(api: Api) -> None:
    """The source of a derive is a path dataset like any other: its 404 is the same bytes as a
    missing one's, whatever the target."""
    hidden = api.post("/v1/datasets/pets/versions/1/derive", who="eve", json={**BODY, "to_dataset": "x"})
    missing = api.post(
        "/v1/datasets/pets-nope/versions/1/derive", who="eve", json={**BODY, "to_dataset": "x"}
    )
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"].replace("'pets'", "N") == missing.json()["error"][
        "message"
    ].replace("'pets-nope'", "N")
