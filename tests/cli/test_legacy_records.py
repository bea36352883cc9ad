"""Records an older datahub stored, through the CLI (issue 24 items 4 and 5): a key from before
the bidi-control rule can be listed by prefix, patched and deleted; new puts keep the rule."""

from __future__ import annotations

import json

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from tests.cli.test_cli import FILES, dh, src  # noqa: F401 - fixtures

LEGACY = "img/\u202egpj.exe"


def store_legacy(tmp_path, *records: Record) -> None:
    with open_catalog(f"sqlite:///{tmp_path / 'var' / 'catalog.db'}") as catalog:
        catalog.store.commit("pets", 1, [Put(r) for r in records])


def test_a_legacy_key_can_be_listed_patched_and_deleted(dh, src, tmp_path):  # noqa: F811
    dh("import", str(src), "--to", "pets")
    store_legacy(tmp_path, Record(LEGACY, "s3://b/x", "e", 1, "", {}, {"class": "cat"}))
    code, out, err = dh("ls", "pets", "--prefix", "img/\u202e", json_output=True)
    assert code == 0 and [json.loads(line)["key"] for line in out.splitlines()] == [LEGACY], err
    changes = tmp_path / "c.jsonl"
    changes.write_text(json.dumps({"op": "patch", "key": LEGACY, "labels": {"class": "x"}}) + "\n")
    code, _, err = dh("commit", "pets", "--changes", str(changes))
    assert code == 0, err
    changes.write_text(json.dumps({"op": "delete", "key": LEGACY}) + "\n")
    code, _, err = dh("commit", "pets", "--changes", str(changes))
    assert code == 0, err
    code, out, _ = dh("export", "pets")
    assert code == 0 and {json.loads(line)["key"] for line in out.splitlines()} == set(FILES)
    changes.write_text(
        json.dumps({"op": "put", "record": {"key": LEGACY, "url": "s3://b/x", "etag": "e", "size": 1}}) + "\n"
    )
    code, _, err = dh("commit", "pets", "--changes", str(changes))
    assert code == 2 and "invisible format characters" in err
