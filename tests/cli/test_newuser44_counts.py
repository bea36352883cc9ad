"""What newuser44 met in the CLI's lines: ``1 objects scanned``, ``1 changes``, ``1 records``,
``1 objects: 1 pages fetched``, ``0 running cache process(es)``; and ``datahub commit`` said only
how many lines it read (``committed pets@v2: 2 changes``), not what they changed.

Counts now agree with their noun (``datahub.words.counted``), and ``commit`` says what the new
version added, removed and modified against its parent, as ``import`` and ``derive`` do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datahub.cli.main import main


@pytest.fixture
def dh(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    home = str(tmp_path / "var")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--home", home, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _changes(path: Path, *changes: dict) -> str:
    path.write_text("".join(json.dumps(c) + "\n" for c in changes))
    return str(path)


def test_counted_agrees_with_its_noun() -> None:
    from datahub.words import counted, noun

    assert counted(1, "file") == "1 file" and counted(2, "file") == "2 files"
    assert counted(0, "record") == "0 records" and counted(1200, "record", thousands=True) == "1,200 records"
    assert (
        noun(3, "directory") == "directories"
        and noun(2, "running cache process") == "running cache processes"
    )
    assert noun(2, "key") == "keys" and noun(1, "entry") == "entry"


def test_one_of_a_thing_is_said_in_the_singular(dh, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    code, out, _ = dh("import", str(src), "--to", "one")
    assert code == 0 and out.strip() == "committed one@v1: 1 added, 0 removed, 0 modified (1 object scanned)"
    code, out, _ = dh("import", str(src), "--to", "one")
    assert code == 0 and "no version created (1 object)" in out, out
    code, out, _ = dh("derive", "one", "--where", "key=a.txt", "--to", "two")
    assert code == 0 and out.strip().startswith("committed two@v1: 1 record (1 added"), out
    code, out, _ = dh("prefetch", "one@1")
    assert code == 0 and out.strip().startswith("prefetch one@v1: 1 object: 1 page fetched"), out
    code, out, _ = dh("cache", "stats")
    assert code == 0 and "counters from 0 running cache processes;" in out, out


def test_commit_says_what_it_added_removed_and_modified_against_the_parent(dh, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a", "b", "c"):
        (src / f"{name}.txt").write_text(name)
    assert dh("import", str(src), "--to", "ds")[0] == 0
    url = (src / "a.txt").as_uri()
    changes = _changes(
        tmp_path / "c.jsonl",
        {"op": "put", "record": {"key": "new.txt", "url": url, "etag": "e1", "size": 1}},
        {"op": "delete", "key": "b.txt"},
        {"op": "patch", "key": "c.txt", "labels": {"class": "cat"}},
    )
    code, out, _ = dh("commit", "ds", "--changes", changes, "-m", "three")
    assert code == 0, out
    assert (
        out.strip() == "committed ds@v2 (3 records) from 3 changes: 1 added, 1 removed, 1 modified against v1"
    )
    one = _changes(tmp_path / "one.jsonl", {"op": "delete", "key": "a.txt"})
    code, out, _ = dh("commit", "ds", "--changes", one)
    assert (
        out.strip() == "committed ds@v3 (2 records) from 1 change: 0 added, 1 removed, 0 modified against v2"
    )
    assert dh("dataset", "create", "fresh")[0] == 0
    first = _changes(
        tmp_path / "first.jsonl", {"op": "put", "record": {"key": "x", "url": url, "etag": "e1", "size": 1}}
    )
    code, out, _ = dh("commit", "fresh", "--changes", first)
    assert (
        out.strip()
        == "committed fresh@v1 (1 record) from 1 change: 1 added, 0 removed, 0 modified against v0 (empty)"
    )
