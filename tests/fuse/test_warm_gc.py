"""A serving daemon's long-lived objects are out of the cyclic GC's full collections (issue 36).

The daemon keeps ~95,000 tracked objects for good, most of them botocore's endpoint and S3
model data loaded with its S3 client. Every full (gen-2) collection walked them all, 45-130
ms with the GIL held, a few times a minute of SSD-tier hits. Once the stores are open (a
version mount: the first quiet second after its listing; a bucket mount: it built its client
before serving) the daemon calls ``gc.freeze()``, and its stats say how many objects are
frozen. What must hold: after a cold read through the mount, with the S3 client built, the
frozen objects include the client's (tens of thousands), for a version and a bucket mount.
"""

from __future__ import annotations

import os

import pytest

from tests.fuse.conftest import FuseEnv, polled_mount, upload_dataset, wait_until

pytestmark = pytest.mark.fuse

#: far below what a daemon with an S3 client holds (~95,000), far above anything a daemon
#: frozen before its client was built could miss by: botocore's S3 model alone is more
CLIENT_OBJECTS = 20_000
GUARD = 60.0


@pytest.mark.parametrize("kind", ["version", "bucket"])
def test_the_daemon_freezes_its_long_lived_objects_once_its_stores_are_open(env: FuseEnv, kind: str) -> None:
    objects = {f"d/f{i}.bin": os.urandom(1000 + i) for i in range(3)}
    ds = upload_dataset(env, "gcf", objects)
    mnt = env.mountpoint(f"gc-{kind}")
    source = f"s3://{env.bucket}/data" if kind == "bucket" else ds.name
    with env.mounted(mnt, source):
        root = mnt if kind == "bucket" else mnt / ds.name / f"v{ds.seq}"
        assert (root / "d/f0.bin").read_bytes() == objects["d/f0.bin"]  # a GET: the S3 client is in use
        wait_until(lambda: polled_mount(env).get("gc_frozen_objects", 0) >= CLIENT_OBJECTS, GUARD)
        row = polled_mount(env)
        assert row["gc_frozen_objects"] >= CLIENT_OBJECTS
        assert row["gc_full_collections"] >= 1  # the collect() before the freeze, at least
        for key, data in objects.items():  # frozen objects still serve
            assert (root / key).read_bytes() == data
