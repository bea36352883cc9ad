"""A version mount through the remote catalog (a node as an API client), its namespace paged
a directory at a time (docs/fuse.md, "The namespace of a version mount"): it reads byte-exact,
and a directory whose listing fails answers EIO, never ENOENT, until the catalog answers."""

from __future__ import annotations

import errno
import json
import os

import pytest

from datahub.api import create_app
from datahub.api.server import ApiServer
from datahub.catalog import open_catalog
from tests.faults import FlakyProxy
from tests.fuse.conftest import FuseEnv, read_tree, sample_objects, upload_dataset

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")


def _remote_env(env: FuseEnv, url: str) -> FuseEnv:
    """The same home and bucket, with the catalog at ``url`` (an API server) instead of SQLite."""
    path = env.root / "remote.toml"
    # a listing that fails every attempt is retried on a short schedule (the [catalog] settings)
    retry = "\n[catalog]\nretry_attempts = 3\nretry_backoff = 0.01\n"
    path.write_text(f'catalog_url = "{url}"\n' + env.config_path.read_text() + retry)
    return FuseEnv(env.root, path, env.config, env.bucket, env.endpoint)


def test_remote_catalog_mount_pages_and_fails_with_eio(env: FuseEnv) -> None:
    objects = sample_objects()
    dataset = upload_dataset(env, "paged", objects)
    env.config.api.port, env.config.api.local_mode = 0, True
    catalog = open_catalog(env.config.resolved_catalog_url)
    only_listings = lambda _method, path: "/directory" in path  # noqa: E731
    try:
        with (
            ApiServer(create_app(env.config, catalog=catalog), env.config) as server,
            FlakyProxy(server.url, status=503, match=only_listings) as proxy,
            _remote_env(env, proxy.url).mounted(env.mountpoint("paged"), "paged@v1", "--no-prefetch"),
        ):
            root = env.mountpoint("paged") / "paged" / f"v{dataset.seq}"
            assert sorted(os.listdir(root)) == ["README.txt", "many", "train"]
            info = json.loads((env.mountpoint("paged") / ".datahub").read_text())
            assert (info["files"], info["versions"]) == (len(objects), ["paged@v1"])
            listed = sum("/directory" in p for _m, p in proxy.requests)
            assert listed == 1  # the version's root: one request, nothing else listed
            # the catalog fails every attempt of the next listing: EIO, never ENOENT
            proxy.fail_more(1000)
            for probe in (lambda: os.listdir(root / "many"), lambda: os.stat(root / "many" / "f001.jpg")):
                with pytest.raises(OSError) as caught:
                    probe()
                assert caught.value.errno == errno.EIO
            proxy.heal()  # the catalog is back: the next lookup lists the directory again
            assert read_tree(root) == objects
    finally:
        catalog.close()
