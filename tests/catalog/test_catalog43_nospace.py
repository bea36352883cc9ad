"""catalog43: a remote commit whose temporary directory fills up while its body is written.

The remote store writes a commit's body once (RAM, then a temporary file past 8 MiB) so every
retry sends the same bytes. A full temporary directory raised a bare ``OSError: [Errno 28]``
out of ``HttpCatalogStore.commit`` (a mount's or LabelX's commit got no datahub error at
all). It is now NoSpace naming the directory and the dataset, and nothing is committed.
"""

from __future__ import annotations

import tempfile

import pytest

from datahub.catalog import Catalog, Put, Record
from datahub.errors import NoSpace
from tests.ingest.test_catalog43_nospace import fill
from tests.tmpfs import small_tmpfs


def test_a_remote_commit_whose_body_fills_the_temporary_directory_says_so(
    tmp_path, shared_api, monkeypatch
) -> None:
    cat = Catalog(shared_api.store(tmp_path))
    try:
        cat.create_dataset("pets")
        changes = (Put(Record(f"k/{i:07d}", f"s3://b/k/{i}", "e" * 40, i)) for i in range(80_000))
        with small_tmpfs(tmp_path / "tmp", "1m") as fs:
            fill(fs)
            monkeypatch.setattr(tempfile, "tempdir", str(fs))
            with pytest.raises(NoSpace) as raised:
                cat.commit("pets", changes)
            monkeypatch.undo()
        message = raised.value.message
        assert str(fs) in message and "'pets'" in message and "nothing was committed" in message
        assert cat.store.head("pets") == 0
    finally:
        cat.close()
