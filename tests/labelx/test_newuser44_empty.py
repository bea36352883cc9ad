"""newuser44: a LabelX project on an empty version is refused with what to do.

Every record of ``pets`` removed (``pets@v2`` empty), "create project" said "project 'p' would be
empty: no records of pets@v2 match the prefix/filter; check them with `datahub ls pets@v2`":
no prefix or filter had been given, and the listing it named lists nothing. It now says the
version holds no records, names the commands that add some (``import``, ``commit``) and the
newest earlier version that holds records. A prefix or filter matching nothing keeps its own
message, which names them.
"""

from __future__ import annotations

from datahub.catalog import Delete
from tests.labelx.conftest import SCHEMA, Session


def _refused(admin: Session, **extra) -> str:
    resp = admin.post("/api/projects", {"name": "p", "dataset": "pets", "schema": SCHEMA, **extra})
    assert resp.status_code == 400, resp.text
    return resp.json()["error"]["message"]


def test_a_project_on_an_empty_version_says_what_to_do(app, env) -> None:
    env.catalog.commit("pets", [Delete(k) for k in env.keys], message="emptied")
    admin = Session(app, "admin")
    assert _refused(admin) == (
        "project 'p' would have nothing to label: pets@v2 holds no records. Add records to pets with "
        "`datahub import SRC --to pets` or `datahub commit pets --changes FILE.jsonl`, then create the "
        "project on the new version, or on v1, which holds 12 records (the Version field, or --version 1)"
    )
    # a prefix that matches nothing in a version with records: the prefix is what to check
    said = _refused(admin, version=1, prefix="nope/")
    assert "no records of pets@v1 match the prefix/filter" in said and "--prefix nope/" in said, said
    assert admin.get("/api/projects").json() == []
