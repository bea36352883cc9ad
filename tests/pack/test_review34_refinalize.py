"""review34: a pack's finalize that dies after its commit and is run again commits nothing more.

The commit id is ``pack-<folder>`` (c983df77): a finalize that committed and died before its
caller heard (a crash, a lost connection) and is run again must answer the version it made,
not commit it twice nor make a second version of the same shards, also when the target moved
on meanwhile (another writer's version on top: the second finalize's deletes differ)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.catalog import Catalog, Put, Record
from datahub.config import Config
from datahub.pack import PackSpec, pack
from tests.pack.conftest import import_manifest, write_source


class _Crash(BaseException):
    """The finalizing process dying right after its commit returned."""


def test_a_finalize_dying_after_its_commit_then_run_again_makes_one_version(
    config: Config, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 3), "photos")
    spec = PackSpec.parse(resize="shorter=40")
    real = Catalog.commit
    committed: list[int] = []

    def commit_then_die(self: Catalog, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        version = real(self, *args, **kwargs)  # type: ignore[arg-type]
        committed.append(version.seq)
        raise _Crash

    monkeypatch.setattr(Catalog, "commit", commit_then_die)
    with pytest.raises(_Crash):
        pack(config, catalog, "photos", "out", spec, workers=0)
    monkeypatch.undo()
    assert committed == [1]
    again = pack(config, catalog, "photos", "out", spec, workers=0)
    assert again.version.seq == 1
    assert [v.seq for v in catalog.log("out")] == [1]

    # another writer's version on top, then the pack run once more: still its own version
    catalog.commit("out", [Put(Record("README", "memory://x/readme", "e", 1))], message="notes")
    third = pack(config, catalog, "photos", "out", spec, workers=0)
    assert third.version.seq == 1
    assert [v.seq for v in catalog.log("out")] == [2, 1]
