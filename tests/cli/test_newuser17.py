"""What a new user typed (newuser17): a version where ``log``, ``diff`` and ``tag`` take a
dataset. Before, each said only "invalid dataset name 'pets@v1'", as if the name were wrong."""

from __future__ import annotations

import argparse
import json

import pytest

from datahub.cli.main import build_parser
from tests.cli.test_cli import FILES, dh, src  # noqa: F401 - fixtures


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


def _arguments(command: str) -> list[argparse.Action]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in commands.choices[command]._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("command", ["log", "ls", "diff", "tag", "export", "derive"])
def test_every_argument_of_the_version_commands_says_what_it_is(command):
    """``datahub diff --help`` showed a bare ``TO`` (its default, latest, unsaid), ``tag --help``
    a bare ``ref``, ``log --help`` a bare ``--limit``."""
    bare = [a.option_strings or a.dest for a in _arguments(command) if not a.help]
    assert bare == [], f"datahub {command} --help leaves unexplained: {bare}"
    for a in _arguments(command):
        if a.default not in (None, "", False) and not a.required:
            assert str(a.default) in a.help, (command, a.dest, a.help)  # its default is said


@pytest.mark.parametrize(
    ("output", "said"),
    [
        (
            "missing/dir/pets.ndjson",
            "-o {tmp}/missing/dir/pets.ndjson: directory {tmp}/missing/dir does not exist",
        ),
        (".", "-o {tmp}: that is a directory; name a file in it (-o {tmp}/NAME)"),
        ("a-file/pets.ndjson", "-o {tmp}/a-file/pets.ndjson: {tmp}/a-file is a file, not a directory"),
    ],
)
def test_export_to_a_path_it_cannot_write_says_why_before_it_reads(dh, src, tmp_path, output, said):  # noqa: F811
    """``export -o`` into a missing directory said "this is a datahub bug" (the temporary
    file's FileNotFoundError); ``-o`` a directory read the whole version, then failed so."""
    assert dh("import", str(src), "--to", "pets")[0] == 0
    (tmp_path / "a-file").write_text("not a directory\n")
    target = str(tmp_path / output) if output != "." else str(tmp_path)
    code, out, err = dh("export", "pets", "-o", target)
    assert code == 2 and out == "", (code, err)
    assert err.startswith("error: " + said.format(tmp=tmp_path)), err
    assert "bug" not in err and "export pets@v1" not in err  # nothing was read: no progress line
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file
    code, _, err = dh("export", "pets", "-o", str(tmp_path / "pets.ndjson"))
    assert code == 0 and len((tmp_path / "pets.ndjson").read_text().splitlines()) == len(FILES)


def test_importing_an_empty_source_says_so_not_that_a_missing_dataset_matches_it(dh, tmp_path):  # noqa: F811
    """``import emptydir --to pets`` said "no changes: pets already matches emptydir", of a
    dataset that does not exist (nor is made)."""
    (tmp_path / "emptydir").mkdir()
    code, out, err = dh("import", str(tmp_path / "emptydir"), "--to", "pets")
    assert code == 0, err
    assert out.strip() == (
        f"nothing to import: {tmp_path / 'emptydir'} holds no objects (check the path or prefix); "
        "no version of pets created"
    )
    assert dh("log", "pets")[0] == 3  # still no such dataset


def test_a_change_set_line_that_is_not_json_says_so_in_words(dh, src, tmp_path):  # noqa: F811
    """It read "change set bad.jsonl line 2: : Invalid JSON: key must be a string at line 1
    column 2": an empty field name, and a line 1 that was the second line."""
    assert dh("import", str(src), "--to", "pets")[0] == 0
    changes = tmp_path / "bad.jsonl"
    changes.write_text('{"op": "delete", "key": "val/cat/3.jpg"}\n{bad json\n')
    code, _, err = dh("commit", "pets", "--changes", str(changes))
    assert code == 2, err
    assert err == f"error: change set {changes} line 2: not valid JSON (key must be a string at column 2)\n"
    changes.write_text('{"op": "put"}\n')  # a field missing: named, as before
    code, _, err = dh("commit", "pets", "--changes", str(changes))
    assert code == 2 and err == f"error: change set {changes} line 1: put.record: Field required\n", err


def test_a_negative_limit_is_refused_by_log_as_by_ls(dh, src):  # noqa: F811
    """``log pets --limit -5`` said "datahub log failed: ValueError: Indices for islice() …;
    this is a datahub bug", where ``ls --limit -1`` says what to give."""
    assert dh("import", str(src), "--to", "pets")[0] == 0
    for command in ("log", "ls"):
        code, out, err = dh(command, "pets", "--limit", "-5")
        assert (code, out, err) == (2, "", "error: invalid limit -5: use a number >= 0\n"), command
    code, out, _ = dh("log", "pets", "--limit", "0", json_output=True)
    assert code == 0 and json.loads(out) == []
