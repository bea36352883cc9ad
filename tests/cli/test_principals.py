"""Owners and access entries given to the CLI follow the API's principal rule: a name no token
could ever carry (``<b>evil</b>``) was accepted by ``dataset create/update`` and refused by
``PATCH /v1/datasets/…``. An entry already stored can still be revoked."""

from __future__ import annotations

import json

from tests.cli.test_cli import dh  # noqa: F401 - the fixture

BAD = "<b>evil</b>"


def test_owner_and_grants_are_principals(dh):  # noqa: F811
    code, _, err = dh("dataset", "create", "a", "--owner", BAD)
    assert code == 2 and "invalid principal" in err, err
    assert dh("dataset", "show", "a")[0] == 3  # nothing created
    code, _, err = dh("dataset", "create", "a", "--acl", f"{BAD}=reader")
    assert code == 2 and "invalid principal" in err, err
    assert (
        dh(
            "dataset",
            "create",
            "a",
            "--owner",
            "alice@example.com",
            "--acl",
            "*=reader",
            "--acl",
            "bob=writer",
        )[0]
        == 0
    )
    for flags in (["--owner", BAD], ["--grant", f"{BAD}=reader"]):
        code, _, err = dh("dataset", "update", "a", *flags)
        assert code == 2 and "invalid principal" in err, (flags, err)
    code, out, _ = dh("dataset", "show", "a", json_output=True)
    shown = json.loads(out)
    assert shown["owner"] == "alice@example.com" and shown["acl"] == {"*": "reader", "bob": "writer"}
    assert dh("dataset", "update", "a", "--revoke", BAD)[0] == 0  # revoking is never refused
