"""newuser36: a change set line with no ``op``, or one that is none of put/delete/patch.

They read "Unable to extract tag using discriminator 'op'" and "Input tag 'frob' found using
'op' does not match any of the expected tags: 'put', 'delete', 'patch'": pydantic's words,
with nothing of what a line looks like.
"""

from __future__ import annotations

import pytest

from tests.cli.test_cli import dh, src  # noqa: F401 - fixtures

SHAPES = (
    'each line is one change, {"op": "put", "record": {…}}, {"op": "delete", "key": …} '
    'or {"op": "patch", "key": …, …}'
)


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ('{"key": "a.jpg"}', 'no "op"'),
        ('{"op": "frob", "key": "a.jpg"}', "op 'frob' is none of put, delete, patch"),
    ],
)
def test_a_change_without_a_known_op_says_what_a_line_is(dh, src, tmp_path, line, what):  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    changes = tmp_path / "changes.jsonl"
    changes.write_text('{"op": "delete", "key": "val/cat/3.jpg"}\n' + line + "\n")
    code, out, err = dh("commit", "pets", "--changes", str(changes))
    assert (code, out) == (2, ""), err
    assert err == f"error: change set {changes} line 2: {what}: {SHAPES}\n", err
    assert dh("log", "pets", "--limit", "5")[1].count("\n") == 2  # the header and v1: nothing committed
