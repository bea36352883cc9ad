"""packed43: a pack job resumed by another datahub release mixed two codes' shards in one
version, and its lineage named the new code for all of them.

The release is ``CODE_VERSION`` (``datahub X.Y.Z; pack layout …``); a test stands for an
upgrade by changing that constant in the modules that read it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import datahub.pack.job as pack_job
import datahub.pack.worker as pack_worker
from datahub.catalog import Catalog
from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.pack import PackSpec, pack, start_job, work
from datahub.pack.worker import PackServices
from datahub.tasks import DONE, TODO, open_task_queue
from tests.pack.conftest import import_manifest, write_source

SPEC = PackSpec.parse(resize="shorter=40", shard_size="1B")  # five tasks, one photo each
NEWER = "datahub 99.0.0; pack layout DHS1; shard datahub.pack.index/1"


def _upgrade(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pack_job, "CODE_VERSION", NEWER)
    monkeypatch.setattr(pack_worker, "CODE_VERSION", NEWER, raising=False)


def _pack_two_of_five(config: Config, catalog: Catalog, tmp_path: Path) -> str:
    import_manifest(catalog, config, write_source(tmp_path / "src", 5), "photos")
    queue = open_task_queue(config.resolved_catalog_url)
    job = start_job(catalog, queue, "photos", "out", SPEC).job
    stop, packed = threading.Event(), []

    def on_sample(n: int) -> None:
        packed.append(n)
        if len(packed) == 2:
            stop.set()

    services = PackServices.open(config)
    try:
        work(services, job, stop=stop, on_sample=on_sample)
    finally:
        services.close()
    states = sorted(t.state for t in queue.tasks(job))
    queue.close()
    assert states.count(DONE) == 2 and states.count(TODO) == 3, states
    return job


def test_a_job_resumed_by_another_release_is_refused_until_restarted(
    config: Config, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _pack_two_of_five(config, catalog, tmp_path)
    before = pack_job.CODE_VERSION
    _upgrade(monkeypatch)
    with pytest.raises(InvalidInput) as refused:
        pack(config, catalog, "photos", "out", SPEC, workers=0)  # it committed the mix, as NEWER's
    assert "--restart" in refused.value.message and before in refused.value.message
    assert job in refused.value.message and NEWER in refused.value.message
    assert not any(v.lineage.get("kind") == "pack" for v in catalog.log("out"))  # nothing committed

    result = pack(config, catalog, "photos", "out", SPEC, workers=0, restart=True)
    assert result.samples == 5 and result.version.lineage["code_version"] == NEWER


def test_a_worker_of_another_release_packs_nothing(
    config: Config, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 3), "photos")
    queue = open_task_queue(config.resolved_catalog_url)
    try:
        job = start_job(catalog, queue, "photos", "out", SPEC).job
        _upgrade(monkeypatch)  # a `datahub pack-worker --job` of a newer release joins
        services = PackServices.open(config)
        try:
            with pytest.raises(InvalidInput, match="--restart"):
                work(services, job)
        finally:
            services.close()
        assert {t.state for t in queue.tasks(job)} == {TODO}
    finally:
        queue.close()
