"""caller33: a pack's version is committed under no id derived from its source.

Its commit id was the job id, a hash of the source's name and version, the target and the
parameters (``plan.job_id``); a writer of the target knows all but the source (the
parameters are in the version's lineage) and may not read it. The catalog answers a commit
id it has seen before the stale base of the commit it came with (so that a retry is a
replay): a commit to the target on base 0 with the id of a guess answered ``commit_id_reused``
(or the error of its changes) for the right source and version and ``stale_base`` for any
other, and the hidden source's name and version were confirmed with nothing written, as the
job id in record URLs did before (``objects_dir``). Now the commit id is the job's random
objects name, which names nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.catalog import Catalog, Put, Record
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import Config
from datahub.errors import StaleBase
from datahub.pack import PackSpec, pack
from datahub.pack.job import _commit
from datahub.pack.plan import job_id
from tests.pack.conftest import import_manifest, write_source


def test_a_commit_with_the_job_id_of_a_guessed_source_is_no_replay(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 2), "photos")
    spec = PackSpec.parse(resize="shorter=40")
    made = pack(config, catalog, "photos", "out", spec, workers=0).version
    guess = job_id("photos", 1, "out", spec)  # the right guess
    probe = [Put(Record("x.jpg", "memory://b/x", "e", 1))]
    with pytest.raises(StaleBase):  # as for any wrong guess: no version answers it
        catalog.commit("out", probe, base=0, commit_id=guess)
    assert [v.seq for v in catalog.log("out")] == [made.seq]
    # the pack run again still answers with its version, committing nothing
    assert pack(config, catalog, "photos", "out", spec, workers=0).version.seq == made.seq
    assert [v.seq for v in catalog.log("out")] == [made.seq]


def test_a_finalize_again_of_a_job_committed_under_its_job_id_answers_that_version(tmp_path: Path) -> None:
    """A job committed before (its commit id its job id) and finalized again now, under the new
    id: the head is that job's version, which answers, and no empty version is added."""
    with Catalog(SQLiteCatalogStore(tmp_path / "c.db")) as catalog:
        catalog.create_dataset("packed")
        records = [Record(f"shards/{i}", f"memory://x/{i}", f"e{i}", 10) for i in range(3)]
        lineage = {"kind": "pack", "job": "pack-0123456789abcdef"}
        first = _commit(catalog, "packed", records, "src@v1", lineage, "pack-0123456789abcdef", "me")
        again = _commit(
            catalog, "packed", records, "src@v1", lineage, "pack-0123456789abcdef", "me", commit_id="pack-x1"
        )
        assert first.seq == again.seq == 1
        assert [v.seq for v in catalog.log("packed")] == [1]
