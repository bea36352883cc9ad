"""newuser42: a dataset just created, with no versions, says so and how the first is made.

``datahub log x`` printed "(none)"; ``datahub ls x@v1``, ``datahub diff x 0 1`` and the like said
"dataset 'x' has no version 1; see `datahub log x`", which led to that "(none)": no word of a
dataset that has no versions yet, nor of the commands that make version 1.
"""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import dh, src  # noqa: F401 - fixtures

SAYS = (
    "dataset 'x' has no versions yet: create version 1 with "
    "`datahub import SRC --to x` or `datahub commit x --changes FILE.jsonl`"
)


@pytest.mark.parametrize(
    "command",
    [
        ("diff", "x", "0", "1"),
        ("diff", "x", "1", "2"),
        ("diff", "x", "0"),
        ("ls", "x@v1"),
        ("ls", "x@1"),
        ("ls", "x"),
        ("ls", "x@golden"),
        ("export", "x@v1"),
        ("tag", "x", "golden", "1"),
    ],
)
def test_a_version_of_a_dataset_with_none_says_it_has_no_versions_yet(dh, command):  # noqa: F811
    assert dh("dataset", "create", "x")[0] == 0
    code, out, err = dh(*command)
    assert (code, out) == (3, ""), err
    assert err == f"error: {SAYS}\n", err
    code, _, err = dh(*command, json_output=True)
    assert code == 3 and json.loads(err)["error"]["message"] == SAYS, err


def test_the_log_of_a_dataset_with_none_says_how_to_make_version_1(dh):  # noqa: F811
    assert dh("dataset", "create", "x")[0] == 0
    code, out, err = dh("log", "x")
    assert (code, out, err) == (0, "", SAYS + "\n")
    assert dh("log", "x", json_output=True)[:2] == (0, "[]\n")  # a pipe's empty list stays


def test_a_missing_version_of_a_dataset_with_versions_still_names_it(dh, src):  # noqa: F811
    assert dh("import", str(src), "--to", "x")[0] == 0
    code, out, err = dh("ls", "x@v7")
    assert (code, out) == (3, "")
    assert err == "error: dataset 'x' has no version 7; see `datahub log x`\n", err
