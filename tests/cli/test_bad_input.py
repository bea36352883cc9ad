"""Hostile input through the CLI (issue 12): a clear message, exit 2/3, nothing written, every
version still listable and exportable."""

from __future__ import annotations

import json

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from tests.cli.test_cli import FILES, dh, src  # noqa: F401 - fixtures
from tests.ingest.conftest import write_tree


def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def all_readable(dh, versions: int) -> None:  # noqa: F811
    log = json.loads(dh("log", "pets", json_output=True)[1])
    assert [v["seq"] for v in log] == list(range(versions, 0, -1))
    for seq in range(1, versions + 1):
        code, out, err = dh("ls", f"pets@{seq}", json_output=True)
        assert code == 0, err
        code, exported, err = dh("export", f"pets@{seq}")
        assert code == 0 and len(exported.splitlines()) == len(out.splitlines()), err
    if versions > 1:
        assert dh("diff", "pets", "1", str(versions))[0] == 0


@pytest.mark.parametrize("ref", ["99999999999999999999", "v99999999999999999999", str(2**63), str(2**70)])
def test_huge_version_numbers_exit_3(dh, src, ref):  # noqa: F811
    dh("import", str(src), "--to", "pets")
    for args in (("ls", f"pets@{ref}"), ("export", f"pets@{ref}"), ("diff", "pets", ref, "1")):
        code, _, err = dh(*args)
        assert code == 3 and "'pets'" in err and "Traceback" not in err, (args, err)
    all_readable(dh, 1)


@pytest.mark.parametrize("tag", ["v3", "v1", "latest"])
def test_tags_named_like_versions_exit_2(dh, src, tag):  # noqa: F811
    dh("import", str(src), "--to", "pets")
    code, _, err = dh("tag", "pets", tag, "1")
    assert code == 2 and "version reference" in err
    assert json.loads(dh("log", "pets", json_output=True)[1])[0]["tags"] == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"op": "put", "record": {"key": "x", "url": "s3://b/x", "etag": "e", "size": 1, "meta": nested(40)}},
         "deeper than 32 levels"),
        # so deep that the change-set parser's own recursion limit refuses the line first
        ({"op": "put", "record": {"key": "x", "url": "s3://b/x", "etag": "e", "size": 1, "meta": nested(300)}},
         "line 2"),
        ({"op": "patch", "key": "train/cat/1.jpg", "labels": nested(40)}, "deeper than 32 levels"),
        ({"op": "put", "record": {"key": "x", "url": "s3://b/x", "etag": "e", "size": 2**70}}, "invalid size"),
        ({"op": "put", "record": {"key": "x", "url": "ftp://h/x", "etag": "e", "size": 1}}, "unsupported object url"),
        ({"op": "put", "record": {"key": "x", "url": "s3://b/x", "etag": "", "size": 1}}, "empty etag"),
        ({"op": "put", "record": {"key": "a/\u202egpj.exe", "url": "s3://b/x", "etag": "e", "size": 1}},
         "invisible format characters"),
    ],
)  # fmt: skip
def test_bad_change_sets_exit_2_and_write_nothing(dh, src, tmp_path, change, why):  # noqa: F811
    dh("import", str(src), "--to", "pets")
    changes = tmp_path / "changes.jsonl"
    changes.write_text(
        json.dumps({"op": "delete", "key": "train/dog/2.jpg"}) + "\n" + json.dumps(change) + "\n"
    )
    code, _, err = dh("commit", "pets", "--changes", str(changes))
    assert code == 2 and why in err and "Traceback" not in err
    all_readable(dh, 1)


def test_a_reused_commit_id_with_other_changes_exits_4(dh, src, tmp_path):  # noqa: F811
    dh("import", str(src), "--to", "pets")
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps({"op": "delete", "key": "train/dog/2.jpg"}) + "\n")
    second.write_text(json.dumps({"op": "delete", "key": "val/cat/3.jpg"}) + "\n")
    assert dh("commit", "pets", "--changes", str(first), "--commit-id", "c1")[0] == 0
    assert dh("commit", "pets", "--changes", str(first), "--commit-id", "c1")[0] == 0  # a retry
    code, _, err = dh("commit", "pets", "--changes", str(second), "--commit-id", "c1")
    assert code == 4 and "'c1'" in err and "pets@v2" in err
    all_readable(dh, 2)


def test_a_filter_with_a_non_numeric_operand_exits_2(dh, src):  # noqa: F811
    dh("import", str(src), "--to", "pets")
    code, _, err = dh("ls", "pets", "--filter", "size>abc")
    assert code == 2 and "needs a number" in err


def test_a_deep_record_stored_before_the_limit_stays_listable_and_exportable(dh, src, tmp_path):  # noqa: F811
    """Written straight to the store (as an older datahub would have): ls, export, diff answer."""
    dh("import", str(src), "--to", "pets")
    with open_catalog(f"sqlite:///{tmp_path / 'var' / 'catalog.db'}") as catalog:
        deep = Record("deep.jpg", "s3://b/deep.jpg", "e", 1, "", nested(300), {"class": "cat"})
        catalog.store.commit("pets", 1, [Put(deep)])
    code, out, err = dh("ls", "pets", "--filter", "labels.class=cat", json_output=True)
    assert code == 0 and "deep.jpg" in out, err
    code, out, _ = dh("export", "pets@2")
    rows = {json.loads(line)["key"]: json.loads(line) for line in out.splitlines()}
    assert code == 0 and set(rows) == set(FILES) | {"deep.jpg"}
    assert set(rows["deep.jpg"]["meta"]) == {"datahub_unreadable"}
    all_readable(dh, 2)


def test_import_refuses_deep_meta_and_writes_nothing(dh, tmp_path):  # noqa: F811
    files = write_tree(tmp_path / "objs", {"a.jpg": b"a", "b.jpg": b"b"})
    manifest = tmp_path / "m.jsonl"
    lines = [
        {"url": (files / "a.jpg").as_uri(), "key": "a.jpg"},
        {"url": (files / "b.jpg").as_uri(), "key": "b.jpg", "meta": nested(100)},
    ]
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, _, err = dh("import", str(manifest), "--to", "pets")
    assert code == 2 and "deeper than 32 levels" in err and "Traceback" not in err
    code, out, _ = dh("dataset", "list", json_output=True)
    assert all(d["head"] == 0 for d in json.loads(out))


@pytest.mark.parametrize(
    "spec", ["labels.class==cat", "labels.class!==cat", "size>==3", "labels.class=cat|=dog"]
)
def test_a_doubled_operator_in_a_filter_exits_2_with_the_syntax(dh, src, spec):  # noqa: F811
    """Issue 37 item 5: ``labels.class==cat`` parsed as the value ``=cat``, matched nothing, exit 0."""
    dh("import", str(src), "--to", "pets")
    code, out, err = dh("ls", "pets@1", "--filter", spec)
    assert code == 2 and out == "", err
    assert f"invalid filter term {spec!r}" in err and "is not an operator" in err and "Traceback" not in err


def test_a_value_that_starts_with_equals_is_written_as_json(dh, src):  # noqa: F811
    dh("import", str(src), "--to", "pets")
    code, _, err = dh("ls", "pets@1", "--filter", 'labels.class="=cat"')
    assert code == 0, err
