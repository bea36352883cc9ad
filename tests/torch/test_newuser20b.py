"""A platform engineer's first hour with datahub.torch, as docs/torch.md tells it.

One packed version (an image and a copied JSON file) is shared by the module's tests; no mount.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config, load_config
from datahub.errors import InvalidInput, JobNotFound
from datahub.pack import PackSpec, pack
from datahub.tasks import open_task_queue
from datahub.torch import CacheSource, MountSource  # no torch here: the tests import its classes
from tests.pack.conftest import import_manifest, write_source
from tests.torch.test_mount import _mounted

RAW = {"meta/info.json": b'{"split": "train"}'}


@pytest.fixture(scope="module")
def packed_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, Path]:
    """``photos@v1`` (2 images, one JSON file) and its pack ``photos-packed@v1``."""
    root = tmp_path_factory.mktemp("newuser20b")
    config = load_config(env={}, overrides={"home": str(root / "var")})  # as tests/conftest.py's
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        import_manifest(catalog, config, write_source(root / "src", 2, extra=RAW), "photos")
        pack(config, catalog, "photos", "photos-packed", PackSpec.parse(non_image="copy"), workers=0)
    finally:
        catalog.close()
    return config, root


@pytest.fixture
def catalog(packed_home: tuple[Config, Path]) -> Iterator[Catalog]:
    cat = open_catalog(packed_home[0].resolved_catalog_url)
    yield cat
    cat.close()


def _as_json(data, labels):
    return json.loads(data) if not bytes(data[:2]).startswith(b"\xff\xd8") else "image"


def test_shard_samples_hand_the_transform_what_indexing_does(
    packed_home: tuple[Config, Path], catalog: Catalog
) -> None:
    """docs/torch.md: every dataset calls ``transform(data, labels)`` with the encoded bytes.
    ``shard_samples`` (what a TaskStream yields) handed a copied file's bytes as a memoryview,
    where ``dataset[i]`` handed bytes: ``json.loads`` failed in the stream only."""
    from datahub.torch import PackedDataset

    config, root = packed_home
    source = CacheSource(config)
    try:
        ds = PackedDataset.open(catalog, source, "photos-packed", "v1", cache_dir=root / "shards",
                                transform=_as_json)  # fmt: skip
    finally:
        source.close()
    by_index = sorted(map(str, (ds[i] for i in range(len(ds)))))
    streamed = sorted(str(s) for shard in range(len(ds.readers)) for s in ds.shard_samples(shard))
    assert by_index == streamed == sorted(["image", "image", str({"split": "train"})])


def test_packed_dataset_of_an_unpacked_version_says_to_pack_it(
    packed_home: tuple[Config, Path], catalog: Catalog
) -> None:
    """docs/torch.md: ``open`` needs a packed version (``datahub pack``). A raw version failed
    with "version 1 has no record 'index.json'", which says neither why nor what to do."""
    from datahub.torch import PackedDataset

    config, root = packed_home
    source = CacheSource(config)
    try:
        with pytest.raises(InvalidInput) as info:
            PackedDataset.open(catalog, source, "photos", "v1", cache_dir=root / "unpacked")
    finally:
        source.close()
    message = str(info.value)
    assert "photos@v1" in message and "datahub pack" in message and "VersionDataset" in message


def test_datahub_url_with_a_mistyped_home_names_it_and_creates_nothing(
    packed_home: tuple[Config, Path],
) -> None:
    """docs/cache.md: ``fsspec.open("datahub://…", home=…)``. A ``home`` with a typo made a new,
    empty catalog (and the home's tree) there, and the file then read as "dataset 'photos' not
    found": the reader was told nothing about where it looked. The right home still reads."""
    config, root = packed_home
    typo = root / "vra"
    for attempt in (
        lambda: fsspec.open("datahub://photos@v1/img/00000.jpg", home=str(typo)).open(),
        lambda: fsspec.filesystem("datahub", home=str(typo), skip_instance_cache=True).ls(""),
    ):
        with pytest.raises(FileNotFoundError) as info:
            attempt()
        assert f"no catalog at {typo / 'catalog.db'}" in str(info.value) and "init" in str(info.value)
        assert not typo.exists()
    fs = fsspec.filesystem("datahub", home=str(config.home_path), skip_instance_cache=True)
    try:
        assert fs.cat_file("photos@v1/meta/info.json") == RAW["meta/info.json"]
    finally:
        fs.close()


@pytest.mark.fuse
@pytest.mark.skipif(shutil.which("fusermount3") is None, reason="needs fuse3")
def test_mount_source_at_the_mount_point_names_the_versions_directory(
    packed_home: tuple[Config, Path], catalog: Catalog
) -> None:
    """docs/torch.md: ``MountSource("/mnt/datahub/photos/v3")``. Given the mount point itself (or
    ``MOUNT/photos``), a mount showing one version passed the version check as if it were a
    bucket snapshot's root, and then every sample failed with a bare FileNotFoundError
    (``MOUNT/img/00000.jpg``): the files are in ``MOUNT/photos/v1/``."""
    from datahub.torch import VersionDataset

    config, root = packed_home
    mnt = root / "mnt"
    with _mounted(config, mnt, "photos@v1", warm_up=False):
        for above in (mnt, mnt / "photos"):
            with pytest.raises(InvalidInput) as info:
                VersionDataset.from_catalog(catalog, "photos", "v1", MountSource(above))
            assert f"MountSource('{mnt / 'photos' / 'v1'}')" in str(info.value)
        ds = VersionDataset.from_catalog(catalog, "photos", "v1", MountSource(mnt / "photos" / "v1"),
                                         transform=lambda data, labels: bytes(data))  # fmt: skip
        assert len(ds) == 3 and RAW["meta/info.json"] in {ds[i] for i in range(len(ds))}


def test_step_timer_counts_the_samples_of_a_dict_batch() -> None:
    """docs/torch.md: ``report()`` gives samples and samples_per_second. A transform returning a
    dict (``{"image": …, "label": …}``) is collated into a dict of tensors, and the timer counted
    its keys (2 per batch: 6 samples for 5) instead of its samples."""
    from datahub.torch import StepTimer
    from datahub.torch._torch import DataLoader, torch

    samples = [{"image": torch.zeros(3, 2, 2), "label": i} for i in range(5)]
    timer = StepTimer()
    batches = list(timer.iterate(DataLoader(samples, batch_size=2)))
    assert len(batches) == 3 and timer.report()["samples"] == 5


def test_datahub_url_of_a_directory_says_it_is_one(packed_home: tuple[Config, Path]) -> None:
    """``fs.isdir("photos@v1/img")`` is True, but ``open``/``cat_file`` of it said "version 1
    has no record 'img'" (FileNotFoundError), as if the path were mistyped."""
    config, _ = packed_home
    fs = fsspec.filesystem("datahub", config=config, skip_instance_cache=True)
    try:
        assert fs.isdir("photos@v1/img")
        for read in (fs.cat_file, fs.open):
            with pytest.raises(IsADirectoryError, match="a directory in photos@v1"):
                read("photos@v1/img")
        with pytest.raises(FileNotFoundError, match="no record 'im'"):
            fs.cat_file("photos@v1/im")  # a prefix of a directory is no directory
    finally:
        fs.close()


def test_a_task_stream_of_a_job_never_made_says_to_make_it_with_shard_epoch(tmp_path: Path) -> None:
    """docs/torch.md: ``shard_epoch`` makes the epoch's job, then the TaskStream reads it. A
    stream of a job not made (a typo, or shard_epoch forgotten) said "start it with `datahub
    pack` first", which makes pack jobs, never an epoch."""
    from datahub.torch import TaskStream

    open_queue = functools.partial(open_task_queue, f"sqlite:///{tmp_path / 'tasks.db'}")
    with pytest.raises(JobNotFound, match=r"shard_epoch\(queue, 'imagenet-epoch-7'") as info:
        list(TaskStream(open_queue, "imagenet-epoch-7", lambda task: [task.index]))
    assert "datahub pack" not in str(info.value)
