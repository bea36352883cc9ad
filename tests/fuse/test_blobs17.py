"""A version whose record names a content-addressed blob under an etag the blob no longer has
(replaced by its own bytes: the short-blob fix of review17a, an RGW multipart race, a put of a
commit before pinblobs16) reads through a real mount in every read mode: the blob hashes to its
name, so the mount serves it (blobs17, ``datahub.cache.selfverify``). Before, the read failed
with ESTALE for good. A blob under that name with other bytes still fails."""

from __future__ import annotations

import errno
import hashlib
import random

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from tests.fuse.conftest import FuseEnv
from tests.fuse.test_integrity14 import MODES, _read_or_errno

pytestmark = pytest.mark.fuse

STALE = '"0123456789abcdef0123456789abcdef"'


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_record_of_a_blob_replaced_by_its_own_bytes_reads_in_every_mode(env: FuseEnv, mode: str) -> None:
    rng = random.Random(17)
    good = rng.randbytes(6 * 1024**2 + 3)  # two 4 MiB pages and a stream's worth
    bad = rng.randbytes(70_000)
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/objects")
        records = []
        for path, data, stored in (("train/good.bin", good, good), ("train/bad.bin", bad, bytes(len(bad)))):
            key = blob_key(hashlib.sha256(data).hexdigest())
            store.put(key, stored)  # "bad": a blob of the right size, not its name's bytes
            checksum = f"sha256:{hashlib.sha256(data).hexdigest()}"
            records.append(Put(Record(path, store.url_for(key), STALE, len(data), checksum=checksum)))
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("blobs")
        seq = catalog.commit("blobs", records, message="records of an etag the blobs lost").seq
    finally:
        catalog.close()
    mnt = env.mountpoint("blobs")
    with env.mounted(mnt, "blobs", *MODES[mode]):
        assert _read_or_errno(mnt / "blobs" / f"v{seq}" / "train" / "good.bin") == good
        assert _read_or_errno(mnt / "blobs" / f"v{seq}" / "train" / "bad.bin") == errno.ESTALE
