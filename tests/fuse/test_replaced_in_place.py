"""Through a real mount: a local source file replaced in place with its size and mtime kept
(``cp -p`` over a same-size file of an equal mtime) is never served mixed with the old one.

The record of an imported directory names the file by its etag; part of the file is read
(and cached) through the mount, the file is replaced, and the rest is read: the old bytes
whole, or an error (ESTALE: the object changed behind the version, re-import it), never a
file made of both (promise 2; tests/storage/test_local_replaced.py has the cases below the
mount).
"""

from __future__ import annotations

import errno
import os
import random

import pytest

from datahub.catalog import open_catalog
from datahub.ingest import import_source
from datahub.storage import StoreRegistry
from tests.fuse.conftest import FuseEnv
from tests.storage.test_local_replaced import replace_keeping_size_and_mtime

pytestmark = pytest.mark.fuse


def test_a_mounted_file_replaced_keeping_size_and_mtime_is_old_bytes_or_estale(env: FuseEnv) -> None:
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write("page_size = 65536\nreadahead_bytes = 0\n")
    env.config = env.config.model_copy(
        update={"cache": env.config.cache.model_copy(update={"page_size": 65536, "readahead_bytes": 0})}
    )
    src = env.root / "src"
    src.mkdir()
    rng = random.Random(11)
    size = 2 * 1024**2
    old, new = rng.randbytes(size), rng.randbytes(size)
    (src / "weights.npy").write_bytes(old)
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with StoreRegistry(env.config) as stores:
            import_source(catalog, env.config, stores, str(src), "local")
    finally:
        catalog.close()
    mnt = env.mountpoint("ro")
    with env.mounted(mnt, "local"):
        path = mnt / "local" / "v1" / "weights.npy"
        fd = os.open(path, os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == old[:4096]  # the first pages: cached under the record's etag
            replace_keeping_size_and_mtime(src / "weights.npy", new)
            got, failed = bytearray(), False
            try:
                while len(got) < size:
                    chunk = os.pread(fd, 1024**2, len(got))
                    if not chunk:
                        break
                    got += chunk
            except OSError as exc:
                assert exc.errno == errno.ESTALE, exc
                assert bytes(got) == old[: len(got)]
                failed = True
            else:
                assert bytes(got) == old, "the mount returned a mix of the old and the new file"
        finally:
            os.close(fd)
    if failed:  # the daemon's log says which object, which version and what to do
        log = (env.root / f"mount-{mnt.name}.log").read_text()
        assert "weights.npy" in log and "re-import it" in log
