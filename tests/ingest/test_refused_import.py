"""A refused manifest import creates nothing (issue 24 item 2): a line with a 70 KB label or meta
deeper than 32 levels used to exit 2 with "change 1" yet leave the dataset behind at head 0.
Now the error names the manifest and its line, and the dataset does not exist afterwards, on
SQLite and on the MongoDB store (mongomock)."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from datahub.catalog import open_catalog
from datahub.errors import DatasetNotFound, InvalidInput
from datahub.ingest import import_source
from tests.cli.test_cli import dh  # noqa: F401 - fixture
from tests.ingest.conftest import write_tree


def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


BAD_LINES = {
    "70 KB label": json.dumps({"url": "{url}", "key": "b.jpg", "labels": {"caption": "x" * 70_000}}),
    "meta 33 levels deep": json.dumps({"url": "{url}", "key": "b.jpg", "meta": nested(33)}),
    "meta 100,000 levels deep": '{"url": "{url}", "key": "b.jpg", "meta": '
    + '{"n": ' * 100_000
    + "1"
    + "}" * 100_001,
}
WHY = {
    "70 KB label": "65536-byte limit",
    "meta 33 levels deep": "32 levels",
    "meta 100,000 levels deep": "32 levels",
}


def manifest(tmp_path, bad: str):
    files = write_tree(tmp_path / "objs", {"a.jpg": b"a", "b.jpg": b"b"})
    path = tmp_path / "m.jsonl"
    good = json.dumps({"url": (files / "a.jpg").as_uri(), "key": "a.jpg"})
    path.write_text(good + "\n\n" + BAD_LINES[bad].replace("{url}", (files / "b.jpg").as_uri()) + "\n")
    return path  # the bad line is line 3


@pytest.mark.parametrize("bad", BAD_LINES)
@pytest.mark.parametrize("store", ["sqlite", "mongomock"])
def test_a_refused_manifest_creates_no_dataset_and_names_the_line(tmp_path, config, stores, store, bad):
    config.home_path.mkdir(parents=True, exist_ok=True)
    url = (
        config.resolved_catalog_url
        if store == "sqlite"
        else f"mongomock://localhost/dh_{uuid.uuid4().hex[:8]}"
    )
    catalog = open_catalog(url)
    try:
        path = manifest(tmp_path, bad)
        with pytest.raises(InvalidInput) as refused:
            import_source(catalog, config, stores, str(path), "x")
        assert f"manifest {path} line 3" in refused.value.message and WHY[bad] in refused.value.message
        assert refused.value.details["line"] == 3
        with pytest.raises(DatasetNotFound):
            catalog.get_dataset("x")
        assert catalog.list_datasets() == []
    finally:
        catalog.close()


@pytest.mark.parametrize("bad", BAD_LINES)
def test_the_cli_exits_2_naming_the_file_and_line_and_creates_nothing(dh, tmp_path, bad):  # noqa: F811
    path = manifest(tmp_path, bad)
    code, _, err = dh("import", str(path), "--to", "x")
    assert code == 2 and f"{path} line 3" in err and "Traceback" not in err, err
    code, out, _ = dh("dataset", "list", json_output=True)
    assert code == 0 and json.loads(out) == []


def test_a_named_pipe_as_the_manifest_is_refused_saying_what_to_do(dh, tmp_path):  # noqa: F811
    """A manifest is read twice, so a pipe cannot be one; before, the CLI said the source did
    not exist (newuser14)."""
    fifo = tmp_path / "list.jsonl"
    os.mkfifo(fifo)
    code, _, err = dh("import", str(fifo), "--to", "x")
    assert code == 2 and "named pipe" in err and "save it to a file" in err and "does not exist" not in err, (
        err
    )
