"""Run INSIDE an image by tests/images/test_built_images.py (``python put_rows_check.py HOME``):
one ``datahub commit --changes`` of a first version's plain puts in key order, the commit that
docs/catalog.md gives to C (``datahub.catalog.put_rows``), with the C module's inserts counted.

Why a script in the image: the module is built by the image build (scripts/build_put_rows.sh in
the Dockerfiles' build stage); only the image's own Python, package and libsqlite3 can tell
whether a commit there takes the C path or falls back to SQLite's ``json_each`` statement.

Prints one JSON object: ``built`` (the module imported), ``inserts`` (what each C insert
returned: the rows inserted, or None when it did not take the text and json_each ran) and the
version's ``rows`` (key, url, etag, size) as the catalog lists them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from datahub.catalog import open_catalog, put_rows
from datahub.cli.main import main
from datahub.config import load_config

LINES = 5000  # three chunks of CHUNK_LINES: the writer thread inserts more than one

inserts: list[int | None] = []


class CountedInserts:
    """The built module's own ``verify`` and ``insert``, with each insert's answer recorded."""

    def __init__(self, module: object) -> None:
        self.verify = module.verify
        self._insert = module.insert

    def insert(self, *args: object) -> int | None:
        rows = self._insert(*args)
        inserts.append(rows)
        return rows


def record(i: int) -> dict[str, object]:
    return {"key": f"img/{i:05d}.jpg", "url": f"s3://bucket/img/{i:05d}.jpg", "etag": f"e{i}", "size": i}


def run(home: Path) -> dict[str, object]:
    if put_rows.BUILT:
        put_rows._put_rows = CountedInserts(put_rows._put_rows)
    changes = home / "changes.jsonl"
    with changes.open("w") as fh:
        for i in range(LINES):
            fh.write(json.dumps({"op": "put", "record": record(i)}, separators=(",", ":")) + "\n")
    assert main(["dataset", "create", "imgs"]) == 0
    assert main(["commit", "imgs", "--changes", str(changes), "-m", "image check"]) == 0
    catalog = open_catalog(load_config().resolved_catalog_url)
    try:
        rows = [[r.key, r.url, r.etag, r.size] for r in catalog.list_records("imgs", None)]
    finally:
        catalog.close()
    return {"built": put_rows.BUILT, "inserts": inserts, "rows": rows}


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]))))
