"""newuser36: ``dataset update --revoke`` of a principal the dataset does not list.

A mistyped ``--revoke alcie`` printed the dataset and exited 0: nothing said that alice kept
her role. The update still goes on (revoking is never refused, tests/cli/test_principals.py),
and a note on stderr names what was not there and what the dataset holds; the same for
``--remove-source`` of a prefix that is no source.
"""

from __future__ import annotations

import json

from tests.cli.test_cli import dh  # noqa: F401 - fixture


def test_revoking_a_role_nobody_holds_says_so_and_keeps_the_others(dh):  # noqa: F811
    assert dh("dataset", "create", "pets", "--acl", "alice=reader", "--acl", "*=reader")[0] == 0
    code, out, err = dh("dataset", "update", "pets", "--revoke", "alcie", "--revoke", "*", json_output=True)
    assert code == 0, err
    assert json.loads(out)["acl"] == {"alice": "reader"}  # '*' went; alice keeps hers
    assert err == (
        "note: 'alcie' holds no role on dataset 'pets' (it has: *=reader, alice=reader): "
        "nothing to remove there; check the spelling\n"
    )
    code, _, err = dh("dataset", "update", "pets", "--revoke", "alice")
    assert code == 0 and err == "", err  # one it holds: no note


def test_removing_a_source_the_dataset_lacks_says_so(dh):  # noqa: F811
    assert dh("dataset", "create", "pets")[0] == 0
    assert dh("dataset", "update", "pets", "--add-source", "s3://b/team/")[0] == 0
    code, out, err = dh("dataset", "update", "pets", "--remove-source", "s3://b/tema/", json_output=True)
    assert code == 0 and json.loads(out)["sources"] == ["s3://b/team/"], err
    assert err == (
        "note: 's3://b/tema/' is no source of dataset 'pets' (it has: s3://b/team/): "
        "nothing to remove there; check the spelling\n"
    )
