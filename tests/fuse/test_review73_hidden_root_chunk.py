"""review73: a bucket mount's root listing ended at the bucket's own ``.datahub``.

A bucket mount answers the name ``.datahub`` at its root with a file of its own and never
lists it (``ReadOnlyView.readdir`` drops that name from the tree's entries). A bucket object
(or directory) of that name sorts before every name that starts with a letter or a digit, so
while the root is still being listed it can be the only entry the tree has final: the tree
answered it, the view dropped it, and the empty answer told the kernel the directory had
ended. ``ls`` of the mount showed nothing (or only what came before it), though the bucket
held more. Listed by directory (more keys than ``cache.bucket_list_whole_objects``) the
whole listing stops right after the first keys, so that state is the mount's first one."""

from __future__ import annotations

import os

import pytest

from datahub.storage import StoreRegistry
from tests.fuse.conftest import FuseEnv

pytestmark = pytest.mark.fuse

OBJECTS = {
    ".datahub": b"the bucket's own object named .datahub",
    "data/a.bin": b"a" * 300,
    "data/b.bin": b"b" * 310,
    "zeta.bin": b"z" * 320,
}
BELOW = {".datahub/inner.bin": b"below the bucket's .datahub/", "data/a.bin": b"a" * 300, "zeta.bin": b"z"}


@pytest.mark.parametrize("objects", [OBJECTS, BELOW], ids=["file", "directory"])
def test_a_bucket_root_listing_goes_on_past_the_hidden_datahub(
    env: FuseEnv, monkeypatch: pytest.MonkeyPatch, objects: dict[str, bytes]
) -> None:
    """The first listing of a by-directory bucket mount's root shows every top-level name of
    the bucket but ``.datahub`` (the mount's own file) exactly once; on the base it showed
    none (the readdir answered no entry for the hidden name: the end of the directory)."""
    monkeypatch.setenv("DATAHUB_CACHE_BUCKET_LIST_WHOLE_OBJECTS", "2")
    url = f"s3://{env.bucket}/hidden"
    with StoreRegistry(env.config) as stores:
        store = stores.store(url)
        for key, data in objects.items():
            store.put(key, data)
    expected = sorted({key.split("/", 1)[0] for key in objects} - {".datahub"})
    mnt = env.mountpoint("hidden")
    with env.mounted(mnt, url, "--no-prefetch"):
        assert sorted(os.listdir(mnt)) == expected  # the mount's first request
        assert (mnt / "zeta.bin").read_bytes() == objects["zeta.bin"]
        assert sorted(os.listdir(mnt)) == expected
