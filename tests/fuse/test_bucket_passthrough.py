"""A bucket mount serves its disk-tier files by FUSE passthrough, as a version mount does.

A bucket mount reads through ``ObservedSource`` (every cold read shown to the background
warm-up first). It forwarded reads and ``backing_fd`` but not the rest of the passthrough
surface, so each published backing file was taken back at once ("changed while published")
and every open of a bucket mount was read through the daemon, with a warning per file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.storage import StoreRegistry
from fuse_adapter.bucket_warmup import ObservedSource
from fuse_adapter.source import ByteSource
from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_passthrough import FILES, GUARD, assert_read_while_stopped, page_files

pytestmark = pytest.mark.fuse


def _protocol_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


def test_the_observed_source_forwards_every_method_of_a_byte_source() -> None:
    missing = _protocol_methods(ByteSource) - _protocol_methods(ObservedSource)
    assert not missing, f"ObservedSource does not forward {sorted(missing)}"


def test_a_bucket_mounts_disk_tier_files_are_read_without_the_daemon(env: FuseEnv) -> None:
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}")
        for key, data in FILES.items():
            store.put(key, data)
    mnt = env.mountpoint("bucket")
    with env.mounted(mnt, f"s3://{env.bucket}", "--passthrough") as proc:
        root = Path(mnt)
        for key, data in FILES.items():  # cold: through the daemon, into the disk tier
            assert (root / key).read_bytes() == data
        wait_until(lambda: len(page_files(env)) >= len(FILES), GUARD)
        assert_read_while_stopped(proc, root)
