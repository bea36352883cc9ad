"""audit15: the task queue makes a new catalog file owner-only, as the catalog does.

The SQLite task queue lives in the catalog's own file. Opened first on a new path (a
``pack-worker`` started before anything else on a fresh home), SQLite made that file with
the umask (0644), and the catalog opened afterwards kept the mode it found: every account of
the machine read every dataset's records, access lists and tokens' records.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from datahub.catalog import open_catalog
from datahub.tasks import open_task_queue
from tests.labelx.test_audit15 import usual_umask  # noqa: F401 - a fixture


def test_a_queue_opened_first_makes_the_catalog_file_owner_only(tmp_path: Path, usual_umask: None) -> None:  # noqa: F811
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    queue = open_task_queue(url)
    try:
        queue.create_job("j", [{"keys": ["a"]}], {"kind": "pack"})
    finally:
        queue.close()
    catalog = open_catalog(url)
    try:
        catalog.create_dataset("pets", owner="alice")
        files = [tmp_path / name for name in ("catalog.db", "catalog.db-wal", "catalog.db-shm")]
        assert {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in files if f.exists()} == {
            f.name: "0o600" for f in files if f.exists()
        }
        assert (tmp_path / "catalog.db").exists() and os.stat(tmp_path / "catalog.db").st_size > 0
    finally:
        catalog.close()
