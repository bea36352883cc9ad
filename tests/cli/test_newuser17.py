"""What a new user typed (newuser17): a version where ``log``, ``diff`` and ``tag`` take a
dataset. Before, each said only "invalid dataset name 'pets@v1'", as if the name were wrong."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import dh, src  # noqa: F401 - fixtures


@pytest.mark.parametrize(
    ("args", "instead"),
    [
        (
            ("log", "pets@v1"),
            "`datahub log pets` lists its versions, `datahub ls pets@v1` the records of one",
        ),
        (("log", "pets@"), "`datahub ls pets@latest`"),
        (("diff", "pets@v1", "pets@v2"), "`datahub diff pets v1 v2` compares two of its versions"),
        (("diff", "pets@1", "2"), "`datahub diff pets 1 2`"),
        (("tag", "pets@v1", "golden"), "`datahub tag pets golden v1` names its version v1"),
        (("tag", "pets@v1", "golden", "--delete"), "`datahub tag pets golden v1`"),
    ],
)
def test_a_version_where_a_dataset_is_taken_says_what_to_run(dh, src, args, instead):  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    code, out, err = dh(*args)
    assert code == 2 and out == "", (code, out, err)
    said = f"error: `datahub {args[0]}` takes a dataset, not a version ({args[1]!r}): "
    assert err.startswith(said) and instead in err and "Traceback" not in err, err
    assert json.loads(dh("log", "pets", json_output=True)[1])[0]["tags"] == []  # nothing tagged


def test_the_dataset_name_alone_still_works(dh, src):  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    assert dh("log", "pets")[0] == 0
    assert dh("tag", "pets", "golden", "1")[0] == 0
    assert dh("diff", "pets", "0", "1")[0] == 0
    code, _, err = dh("log", "Pets!")  # no version in it: the name's own rule, as before
    assert code == 2 and "invalid dataset name 'Pets!'" in err, err
