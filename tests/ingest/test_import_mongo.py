"""The importer is store-agnostic: the same re-import semantics on the MongoDB store (mongomock)."""

from __future__ import annotations

import uuid

from datahub.catalog import open_catalog
from datahub.ingest import import_source
from tests.ingest.conftest import write_tree


def test_import_and_reimport_on_the_mongo_store(tmp_path, config, stores):
    catalog = open_catalog(f"mongomock://localhost/dh_ingest_{uuid.uuid4().hex[:8]}")
    try:
        src = write_tree(tmp_path / "src", {f"d/{i:03d}.bin": bytes([i]) for i in range(40)})
        assert import_source(catalog, config, stores, str(src), "ds").added == 40
        assert import_source(catalog, config, stores, str(src), "ds").version is None
        (src / "d/007.bin").unlink()
        write_tree(src, {"d/100.bin": b"new"})
        report = import_source(catalog, config, stores, str(src), "ds")
        assert (report.version.seq, report.added, report.removed, report.modified) == (2, 1, 1, 0)
        assert [e.key for e in catalog.diff("ds", 1, 2)] == ["d/007.bin", "d/100.bin"]
    finally:
        catalog.close()
