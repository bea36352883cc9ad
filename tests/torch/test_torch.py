"""torch datasets over real versions: packed shards, raw records, task-pulling streams."""

from __future__ import annotations

import functools
import stat
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config
from datahub.pack import PackSpec, pack
from datahub.tasks import DONE, open_task_queue
from datahub.torch import CacheSource, MountSource  # no torch here: the tests import its classes
from tests.pack.conftest import import_manifest, write_source

if TYPE_CHECKING:
    from datahub.torch import PackedDataset

N = 12


@pytest.fixture
def catalog(config: Config) -> Iterator[Catalog]:
    cat = open_catalog(config.resolved_catalog_url)
    yield cat
    cat.close()


@pytest.fixture
def packed(config: Config, catalog: Catalog, tmp_path: Path) -> PackedDataset:
    from datahub.torch import PackedDataset

    import_manifest(catalog, config, write_source(tmp_path / "src", N), "photos")
    pack(
        config,
        catalog,
        "photos",
        "photos-packed",
        PackSpec.parse(resize="48x32", shard_size="50KB"),
        workers=0,
    )
    source = CacheSource(config)
    try:
        return PackedDataset.open(catalog, source, "photos-packed", cache_dir=tmp_path / "shards",
                                  transform=_shape_and_class)  # fmt: skip
    finally:
        source.close()


def _shape_and_class(data, labels):
    from datahub.torch._torch import image_tensor

    return tuple(image_tensor(data).shape), labels["class"]


def test_packed_dataset_global_index_over_shards(packed: PackedDataset) -> None:
    assert len(packed) == N and len(packed.readers) >= 3  # several shards
    assert packed[0] == ((3, 32, 48), 0) and packed[N - 1] == ((3, 32, 48), (N - 1) % 3)
    assert [packed.locate(i)[1] for i in range(N)] == [f"img/{i:05d}.jpg" for i in range(N)]
    with pytest.raises(IndexError):
        packed[N]


def test_packed_dataset_shard_copies_are_owner_only(packed: PackedDataset, tmp_path: Path) -> None:
    """The local shard copies hold the dataset's bytes: no other local user reads them
    (docs/cache.md, "Who may read the cache's files")."""
    shards = tmp_path / "shards"
    copies = list(shards.glob("*.lmdb"))
    assert len(copies) >= 3 and oct(stat.S_IMODE(shards.stat().st_mode)) == oct(0o700)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in copies} == {oct(0o600)}


def test_packed_dataset_shuffles_across_shards_with_worker_processes(packed: PackedDataset) -> None:
    from datahub.torch._torch import DataLoader

    packed[0]  # the parent opens LMDB handles first: forked workers must not reuse them
    loader = DataLoader(packed, batch_size=5, shuffle=True, num_workers=2,
                        collate_fn=lambda batch: batch)  # fmt: skip
    seen = [item for batch in loader for item in batch]
    assert Counter(cls for _, cls in seen) == Counter(i % 3 for i in range(N))  # each sample exactly once
    assert {shape for shape, _ in seen} == {(3, 32, 48)}


class RecordingSource(MountSource):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.hints: list[list[str]] = []

    def hint(self, records) -> None:
        self.hints.append([r.key for r in records])


def test_version_dataset_reads_through_cache_and_mount_and_hints_order(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    from datahub.torch import VersionDataset

    import_manifest(catalog, config, write_source(tmp_path / "src", 6), "photos")
    cached = VersionDataset.from_catalog(catalog, "photos", None, CacheSource(config))
    mounted = VersionDataset.from_catalog(catalog, "photos", "v1", RecordingSource(tmp_path / "src"))
    assert len(cached) == len(mounted) == 6
    image, labels = cached[4]
    assert tuple(image.shape) == (3, 240, 320 + 8 * 4) and labels == {"class": 1}
    assert bool((mounted[4][0] == image).all())
    order = [5, 0, 3, 1, 4, 2]
    assert list(mounted.hinting(order, lookahead=4)) == order
    assert mounted.source.hints == [
        [f"img/{i:05d}.jpg" for i in order[:4]],
        [f"img/{i:05d}.jpg" for i in order[4:]],
    ]
    cached.source.hint([cached.records[i] for i in order])  # the real cache accepts the order
    cached.source.close()


def test_task_stream_survives_workers_leaving_and_joining(config: Config, tmp_path: Path) -> None:
    from datahub.torch import TaskStream, shard_epoch

    open_queue = functools.partial(open_task_queue, config.resolved_catalog_url)
    queue = open_queue()
    job = shard_epoch(queue, "epoch-1", 6)

    def produce(task):
        shard = task.payload["shard"]
        return [(shard, j) for j in range(3)]

    leaver = iter(TaskStream(open_queue, job, produce, name="leaver"))
    partial = [next(leaver), next(leaver)]  # takes shard 0, yields two samples, then leaves
    leaver.close()
    assert partial == [(0, 0), (0, 1)]
    assert next(queue.tasks(job)).state == "TODO"  # handed back at once, not at lease expiry
    got: list[tuple[int, int]] = []
    streams = [TaskStream(open_queue, job, produce, name=f"joiner{i}", poll_seconds=0.05) for i in range(2)]
    threads = [threading.Thread(target=lambda s=s: got.extend(s)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(got) == [(s, j) for s in range(6) for j in range(3)]  # every shard, in full, once
    assert dict(queue.get_job(job).counts) == {DONE: 6}
    queue.close()


def test_task_stream_in_a_dataloader_over_packed_shards(packed: PackedDataset, config: Config) -> None:
    from datahub.torch import TaskStream, shard_epoch
    from datahub.torch._torch import DataLoader

    open_queue = functools.partial(open_task_queue, config.resolved_catalog_url)
    queue = open_queue()
    job = shard_epoch(queue, "packed-epoch", len(packed.readers))
    queue.close()
    stream = TaskStream(open_queue, job, lambda task: packed.shard_samples(task.payload["shard"]))
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    assert Counter(cls for _, cls in loader) == Counter(i % 3 for i in range(N))


def test_loader_settings_and_step_timer() -> None:
    from datahub.torch import StepTimer, recommend_loader_settings

    assert recommend_loader_settings(cpus=8, cuda=False).kwargs() == {
        "num_workers": 7, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": True}  # fmt: skip
    one = recommend_loader_settings(cpus=1, cuda=True, packed=False)
    assert one.kwargs() == {"num_workers": 0, "pin_memory": True, "persistent_workers": False}
    ticks = iter([0.0, 0.5, 1.5, 1.6, 3.6])  # wait 0.5, work 1.0, wait 0.1, work 2.0, end
    timer = StepTimer(clock=lambda: next(ticks))
    assert list(timer.iterate([[1, 2, 3], [4, 5]], batch_size=len)) == [[1, 2, 3], [4, 5]]
    report = timer.report()
    assert report["batches"] == 2 and report["samples"] == 5
    assert report["data_time_per_batch"] == pytest.approx(0.3)
    assert report["compute_time_per_batch"] == pytest.approx(1.5)
    assert report["data_fraction"] == pytest.approx(0.6 / 3.6)
