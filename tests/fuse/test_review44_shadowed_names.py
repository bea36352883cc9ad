"""review44: a bucket mount's own ``.datahub`` served as a record's bytes.

A bucket snapshot mount shows the bucket's keys at its root, and there also answers the name
``.datahub`` with a generated file of its own (which snapshot it shows; not listed). A bucket
object ``.datahub`` is recorded in the snapshot like any other, but on the mount its name is
the mount's file: ``MountSource`` read record ``.datahub`` as the mount's JSON (another
object's bytes under the record, promise 2), and a record below it (``.datahub/x``) failed with
a bare NotADirectoryError. It refuses such a record now, naming it and what to do; every
other record reads its own bytes, and the snapshot mounted as a version (its keys below
``MNT/<dataset>/v<N>``, where nothing is shadowed) reads all of them."""

from __future__ import annotations

import pytest

from datahub.catalog import open_catalog
from datahub.errors import InvalidInput
from datahub.storage import StoreRegistry
from tests.fuse.conftest import FuseEnv, snapshot_version

pytestmark = pytest.mark.fuse

# a key and keys below it give no sample for the file (docs/torch.md), so the file `.datahub`
# and the directory `.datahub/` are two buckets' cases
NAMED = {
    ".datahub": b"the bucket's own object named .datahub",
    "a.bin": b"a" * 300,
    "sub/.datahub": b"a .datahub below the root is no mount's: an object like any other",
}
BELOW = {".datahub/inner.bin": b"an object below the bucket's .datahub/", "b.bin": b"b" * 310}
SHADOWED = (".datahub", ".datahub/inner.bin")


def _bytes(data: bytes | memoryview, _labels: object) -> bytes:
    return bytes(data)


@pytest.mark.parametrize("objects", [NAMED, BELOW], ids=["named", "below"])
def test_a_record_shadowed_by_the_mounts_datahub_is_refused_never_read(
    env: FuseEnv, objects: dict[str, bytes]
) -> None:
    from datahub.torch import CacheSource, MountSource, VersionDataset

    url = f"s3://{env.bucket}/data"
    with StoreRegistry(env.config) as stores:
        store = stores.store(url)
        for key, data in objects.items():
            store.put(key, data)
    mnt, versions = env.mountpoint("bucket"), env.mountpoint("versions")
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with env.mounted(mnt, url):
            name, seq = snapshot_version(mnt)
            shown = f"{name}@v{seq}"
            recorded = {r.key for r in catalog.list_records(name, seq)}
            assert recorded == set(objects)  # the snapshot holds the bucket's .datahub objects
            assert (mnt / ".datahub").read_bytes() != objects.get(".datahub")  # the mount's own file
            # the selection holding a shadowed record is refused before any epoch starts
            with pytest.raises(InvalidInput) as refused:
                VersionDataset.from_catalog(catalog, name, seq, MountSource(mnt), transform=_bytes)
            [key] = [k for k in objects if k in SHADOWED]
            said = refused.value.message
            assert repr(key) in said and str(mnt) in said and shown in said, said
            assert "CacheSource" in said and f"datahub mount MNT {shown}" in said, said
            assert refused.value.details == {"key": key, "version": shown}
            # a record read through the source alone is refused the same way; every other reads its own
            source = MountSource(mnt)
            source.check_version(name, seq)
            read = {}
            for record in catalog.list_records(name, seq):
                if record.key in SHADOWED:
                    with pytest.raises(InvalidInput, match="the mount's own file"):
                        source.read(record)
                else:
                    read[record.key] = source.read(record)
            assert read == {k: v for k, v in objects.items() if k not in SHADOWED}
            # what the error says to do: the cache, or the snapshot mounted as a version, reads them all
            cached = VersionDataset.from_catalog(
                catalog, name, seq, CacheSource(env.config), transform=_bytes
            )
            assert {r.key: cached[i] for i, r in enumerate(cached.records)} == objects
            cached.source.close()
            # mounted as a version, the snapshot's keys are below MNT/<dataset>/v<N>: none is shadowed
            with env.mounted(versions, f"{name}@v{seq}"):
                whole = VersionDataset.from_catalog(
                    catalog, name, seq, MountSource(versions / name / f"v{seq}"), transform=_bytes
                )
                assert {r.key: whole[i] for i, r in enumerate(whole.records)} == objects
    finally:
        catalog.close()
