"""review14c: datahub.torch's pinned MountSource (7b1504b) on a real mount.

What a pinned source costs per read (the FUSE requests a read sends, counted at the kernel's
tracepoint against plain reads of the same files), and whether its pinned state survives
the trip to a DataLoader worker (spawned: pickled; forked: copied) and still refuses a
remounted newer version there."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from tests.fuse.conftest import FuseEnv, upload_dataset
from tests.fuse.fuse_tracepoint import FuseRequests, available
from tests.loader_workers import no_worker_outlives_its_test, read_all  # noqa: F401 - autouse

pytestmark = pytest.mark.fuse


def _other_bytes(rng: random.Random, old: bytes) -> bytes:
    new = bytearray(rng.randbytes(len(old)))
    new[0] = old[0] ^ 0xFF
    return bytes(new)


def _read_all(dataset) -> list[bytes]:
    return [dataset[i] for i in range(len(dataset))]


def _but_reclaimable(counts: dict[str, int]) -> dict[str, int]:
    """The counts but READ and LOOKUP: the shared machine may reclaim page cache and dentries
    between two passes (11 LOOKUPs were seen once in eight runs); the mount-id check is a
    statx of an open descriptor, which walks no path and reads no page."""
    return {op: n for op, n in counts.items() if op not in ("FUSE_READ", "FUSE_LOOKUP")}


def _identity(data: bytes, _labels: object) -> bytes:
    return bytes(data)


def _through_workers(dataset, context: str) -> list[bytes]:
    """Every item of ``dataset`` read in one DataLoader worker started by ``context``."""
    from torch.utils.data import DataLoader

    return read_all(DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context=context))


@pytest.mark.skipif(available() is not None, reason=f"fuse tracepoint: {available()}")
def test_a_pinned_source_sends_no_request_a_plain_read_of_its_files_does_not(env: FuseEnv) -> None:
    """Warm, each read of a pinned ``MountSource`` costs what ``read_file`` of the same path
    costs: the mount-id check (statx, AT_STATX_DONT_SYNC, no attribute asked) adds no
    GETATTR or other request."""
    from datahub.torch import MountSource, VersionDataset, read_file

    rng = random.Random(14)
    files = {f"d/{i:02d}.bin": rng.randbytes(3000 + i) for i in range(8)}
    dataset = upload_dataset(env, "costs", files)
    mnt = env.mountpoint("costs")
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        # --passthrough: both passes in one read mode (the default mode may switch to zero-message
        # opens once the files are in the page cache, between the two passes: suite17 saw it)
        with env.mounted(mnt, dataset.name, "--no-prefetch", "--passthrough"):
            root = mnt / dataset.name / "latest"
            pinned = VersionDataset.from_catalog(
                catalog, dataset.name, 1, MountSource(root), transform=_identity
            )
            paths = [mnt / dataset.name / "v1" / r.key for r in pinned.records]
            assert _read_all(pinned) == [files[r.key] for r in pinned.records]  # warm
            assert [read_file(p) for p in paths] == [files[r.key] for r in pinned.records]
            with FuseRequests(mnt) as plain:
                for p in paths:
                    read_file(p)
            with FuseRequests(mnt) as through:
                _read_all(pinned)
            assert _but_reclaimable(through.counts()) == _but_reclaimable(plain.counts()), (
                through.counts(),
                plain.counts(),
            )
            assert through.counts()["FUSE_OPEN"] == len(paths)  # the reads were counted
    finally:
        catalog.close()


@pytest.mark.parametrize(("context", "relative"), [("fork", True), ("spawn", True), ("spawn", False)])
def test_a_pinned_source_in_dataloader_workers_reads_its_version_and_refuses_a_remount(
    env: FuseEnv, tmp_path: Path, context: str, relative: bool
) -> None:
    """A ``VersionDataset`` over ``MountSource`` of a symlink into the mount (``link ->
    MOUNT/ds/latest``; as a path relative to the cwd at its making, which the workers do not
    share), pinned to v1, read in a DataLoader worker: v1's
    bytes. The mount is made again after v2 was committed (latest -> v2): a new worker gets
    v1's bytes or an error, never v2's bytes under v1's records."""
    from datahub.torch import MountSource, VersionDataset

    rng = random.Random(1414)
    v1 = {"x/a.bin": rng.randbytes(5000), "x/b.bin": rng.randbytes(7000)}
    dataset = upload_dataset(env, f"workers-{context}-{int(relative)}", v1)
    v2 = {key: _other_bytes(rng, data) for key, data in v1.items()}
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/data-{context}-{int(relative)}")
        changes = [Put(Record(k, store.url_for(k), store.put(k, d).etag, len(d))) for k, d in v2.items()]
    mnt = env.mountpoint(f"w-{context}-{int(relative)}")
    (tmp_path / "link").symlink_to(mnt / dataset.name / "latest")
    catalog = open_catalog(env.config.resolved_catalog_url)
    cwd = os.getcwd()
    try:
        with env.mounted(mnt, dataset.name, "--no-prefetch"):
            os.chdir(tmp_path)
            try:
                pinned = VersionDataset.from_catalog(
                    catalog,
                    dataset.name,
                    1,
                    MountSource("link" if relative else tmp_path / "link"),
                    transform=_identity,
                )
            finally:
                os.chdir(cwd)
            expected = [v1[r.key] for r in pinned.records]
            assert _through_workers(pinned, context) == expected
        catalog.commit(dataset.name, changes, message="v2")
        with env.mounted(mnt, dataset.name, "--no-prefetch"):  # latest -> v2 now
            assert (mnt / dataset.name / "latest").resolve().name == "v2"
            try:
                got = _through_workers(pinned, context)
            except Exception as exc:  # the worker's error, re-raised by the DataLoader
                refused = isinstance(exc, (FileNotFoundError, ObjectChanged)) or "no longer shows" in str(exc)
                assert refused, f"not a refusal: {exc!r}"
                return
            assert got == expected, "version 2's bytes under version 1's records"
    finally:
        catalog.close()
