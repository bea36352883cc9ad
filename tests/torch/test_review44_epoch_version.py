"""review44: one epoch mixed two versions' packed shards. A task of ``shard_epoch`` is a shard
number, and the job was keyed by its name only: a second process calling ``shard_epoch`` with
the same job name and another version's dataset (as many shards) joined the same epoch, and its
workers read v2's shards under tasks made for v1, so the epoch held samples of both versions.
The epoch now records its version; another version is a Conflict (409 through an API server)
naming the job, both versions and what to do, and ``PackedDataset.task_samples`` refuses a
task of another version's epoch."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config
from datahub.errors import Conflict
from datahub.pack import PackSpec, pack
from datahub.tasks import TaskQueue, open_task_queue
from datahub.torch import CacheSource
from tests.pack.conftest import import_manifest, write_source
from tests.tasks.test_queue import clock, queue, shared_api  # noqa: F401 - the conformance fixtures

if TYPE_CHECKING:
    from datahub.torch import PackedDataset


def _epoch(version: str) -> dict:
    return {"kind": "epoch", "source": "photos-packed", "version": version}


def test_a_job_recording_a_version_refuses_another_one(queue: TaskQueue) -> None:  # noqa: F811
    """Every store (SQLite, MongoDB, and the API server's, where it is a 409)."""
    shards = [{"shard": i, "version": "photos-packed@v1"} for i in range(3)]
    queue.create_job("epoch-3", shards, _epoch("photos-packed@v1"))
    taken = queue.claim("epoch-3", "w1", 30)
    assert taken is not None
    other = [{"shard": i, "version": "photos-packed@v2"} for i in range(3)]
    with pytest.raises(Conflict) as caught:
        queue.create_job("epoch-3", other, _epoch("photos-packed@v2"))
    error = caught.value
    assert (error.code, error.http_status) == ("conflict", 409)
    assert "'epoch-3'" in error.message and "photos-packed@v1" in error.message
    assert "photos-packed@v2" in error.message and "job of its own" in error.message
    assert queue.get_job("epoch-3").meta["version"] == "photos-packed@v1"  # nothing changed
    assert [t.payload["version"] for t in queue.tasks("epoch-3")] == ["photos-packed@v1"] * 3
    # the same version joins (idempotent); a caller naming none cannot erase the recorded one
    assert queue.create_job("epoch-3", shards, _epoch("photos-packed@v1")).counts["DOING"] == 1
    queue.create_job("epoch-3", shards, {"kind": "epoch"})
    assert queue.get_job("epoch-3").meta["version"] == "photos-packed@v1"
    with pytest.raises(Conflict):
        queue.create_job("epoch-3", other, _epoch("photos-packed@v2"))


@pytest.fixture
def two_versions(config: Config, tmp_path: Path) -> Iterator[tuple[PackedDataset, PackedDataset]]:
    """``photos-packed`` v1 (48x32) and v2 (40x24): the same 8 photos in as many shards."""
    from datahub.torch import PackedDataset

    catalog: Catalog = open_catalog(config.resolved_catalog_url)
    import_manifest(catalog, config, write_source(tmp_path / "src", 8), "photos")
    opened = []
    source = CacheSource(config)
    try:
        for size in ("48x32", "40x24"):
            spec = PackSpec.parse(resize=size, shard_size="50KB")
            pack(config, catalog, "photos", "photos-packed", spec, workers=0)
            opened.append(PackedDataset.open(catalog, source, "photos-packed", None,
                                             cache_dir=tmp_path / f"shards-{size}", transform=_size))  # fmt: skip
    finally:
        source.close()
        catalog.close()
    v1, v2 = opened
    assert (v1.version, v2.version) == ("photos-packed@v1", "photos-packed@v2")
    assert len(v1.readers) == len(v2.readers) > 1  # the same task count: joined silently before
    yield v1, v2


def _size(data, labels):
    from datahub.torch._torch import image_tensor

    return tuple(image_tensor(data).shape)


def test_a_second_process_with_another_version_cannot_join_the_epoch(
    two_versions: tuple[PackedDataset, PackedDataset], config: Config
) -> None:
    from datahub.torch import TaskStream, shard_epoch

    v1, v2 = two_versions
    open_queue = functools.partial(open_task_queue, config.resolved_catalog_url)
    q = open_queue()
    job = shard_epoch(q, "photos-epoch-0", v1)  # process A, training on v1
    assert q.get_job(job).meta == {"kind": "epoch", "source": "photos-packed", "version": "photos-packed@v1"}
    with pytest.raises(Conflict) as caught:  # process B opened v2 under the same job name
        shard_epoch(q, job, v2)
    text = caught.value.message
    assert "'photos-epoch-0'" in text and "photos-packed@v1" in text and "photos-packed@v2" in text
    assert shard_epoch(q, job, v1) == job  # A's own second call (idempotent)

    # B's workers, had they been started over A's job anyway: no v2 sample under a v1 task
    b_stream = TaskStream(open_queue, job, v2.task_samples, name="b")
    with pytest.raises(Conflict, match="photos-packed@v1"):
        next(iter(b_stream))
    a_stream = TaskStream(open_queue, job, v1.task_samples, name="a")
    assert list(a_stream) == [(3, 32, 48)] * 8  # the whole epoch, every sample v1's (48x32)
    assert dict(q.get_job(job).counts) == {"DONE": len(v1.readers)}
    q.close()


def test_a_shard_count_with_version_is_checked_too(config: Config) -> None:
    from datahub.torch import shard_epoch

    q = open_task_queue(config.resolved_catalog_url)
    shard_epoch(q, "counted", 2, version="pets@v4", source="pets")
    with pytest.raises(Conflict, match="pets@v4"):
        shard_epoch(q, "counted", 2, version="pets@v5", source="pets")
    assert [t.payload for t in q.tasks("counted")] == [{"shard": 0, "version": "pets@v4"},
                                                           {"shard": 1, "version": "pets@v4"}]  # fmt: skip
    q.close()
