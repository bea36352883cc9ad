"""review25: ``MountSource`` of a directory *below* a version's directory is refused.

A ``MountSource`` reads record ``k`` as ``<root>/k``, and ``check_version`` asked only which
version the directory is on. Given ``MOUNT/ds/v1/a`` (a subdirectory of the version), it
passed, and record ``a/x`` was read as ``MOUNT/ds/v1/a/a/x``: the bytes of the key ``a/a/x``
under the record of ``a/x`` (promise 2). Now it is refused, naming the directory to give."""

from __future__ import annotations

import pytest

from datahub.catalog import open_catalog
from datahub.errors import InvalidInput
from tests.fuse.conftest import FuseEnv, upload_dataset

pytestmark = pytest.mark.fuse


def test_a_directory_below_a_version_directory_is_refused(env: FuseEnv) -> None:
    from datahub.torch import MountSource, VersionDataset

    files = {"a/x": b"the file a/x", "a/a/x": b"the file a/a/x, not a/x", "b": b"b"}
    dataset = upload_dataset(env, "nested", files)
    mnt = env.mountpoint("nested")
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with env.mounted(mnt, dataset.name, "--no-prefetch"):
            top = mnt / dataset.name / "v1"
            assert (top / "a" / "a" / "x").read_bytes() == files["a/a/x"]
            for below in (top / "a", mnt / dataset.name / "latest" / "a"):
                try:
                    ds = VersionDataset.from_catalog(
                        catalog, dataset.name, 1, MountSource(below), transform=lambda d, _: bytes(d)
                    )
                except InvalidInput as exc:  # refused, naming the version's own directory
                    assert f"MountSource({str(top)!r})" in exc.message, exc.message
                    continue
                for i, record in enumerate(ds.records):  # else: the record's bytes, or an error
                    try:
                        got = ds[i]
                    except OSError:
                        continue
                    assert got == files[record.key], f"{record.key}: another key's bytes"
            ds = VersionDataset.from_catalog(
                catalog, dataset.name, 1, MountSource(top), transform=lambda d, _: bytes(d)
            )
            assert {r.key: ds[i] for i, r in enumerate(ds.records)} == files
    finally:
        catalog.close()
