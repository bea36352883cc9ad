"""catalog43: a full temporary directory while an import spools its change set.

An import writes its whole change set to a temporary file before its one commit (and a
manifest's sorted runs, when it is large). When that file system filled up, the import died
with a bare ``OSError: [Errno 28] No space left on device`` out of ``import_source``: no word
of which file system, of the dataset, or of whether anything was committed. It is now
NoSpace naming the temporary directory and the dataset, saying nothing was committed; and
nothing is (the dataset is not even created). A real, full tmpfs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from datahub.errors import DatasetNotFound, NoSpace
from datahub.ingest import import_source
from tests.ingest.conftest import write_tree
from tests.tmpfs import small_tmpfs


def fill(fs: Path) -> None:
    """Write until the file system refuses (unbuffered: nothing left to flush at close)."""
    with open(fs / "ballast", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass


def test_an_import_whose_temporary_directory_fills_up_says_so_and_commits_nothing(
    tmp_path, config, catalog, stores, monkeypatch
) -> None:
    src = write_tree(tmp_path / "src", {f"d/{i:04d}.bin": b"x" for i in range(400)})
    with small_tmpfs(tmp_path / "tmp", "1m") as fs:
        fill(fs)
        monkeypatch.setattr(tempfile, "tempdir", str(fs))
        with pytest.raises(NoSpace) as raised:
            import_source(catalog, config, stores, str(src), "pets")
        monkeypatch.undo()
    message = raised.value.message
    assert str(fs) in message and "'pets'" in message and "nothing was committed" in message
    with pytest.raises(DatasetNotFound):
        catalog.get_dataset("pets")
    # with space again, the same import commits the whole source
    report = import_source(catalog, config, stores, str(src), "pets")
    assert report.version is not None and report.version.record_count == 400
