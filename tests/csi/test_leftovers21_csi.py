"""NodePublishVolume of a view that cannot be read is not NOT_FOUND.

The plugin checked the view (``DATASET/vN/PREFIX`` of its mount) with ``os.path.isdir``,
which says False for every error: a mount whose listing could not be loaded (the catalog did
not answer; lookups answer EIO, never ENOENT) was reported to the kubelet as NOT_FOUND "not a
directory of imgs@v1 (check the prefix attribute)", as if the volume did not exist.

A real API server as the plugin's catalog, behind a proxy that fails the mount's listing
requests; the kubelet's side is the gRPC socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Plugin, mounts_under, node_config, serving_api
from tests.faults import FlakyProxy

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module")
def flaky_catalog(
    csi_env: CsiEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Plugin, FlakyProxy]]:
    """A node plugin whose catalog is ``datahub serve --local`` (loopback) through a proxy that
    fails the listing requests it is armed for (``…/records``, ``…/directory``), and only those."""
    tmp_path = tmp_path_factory.mktemp("flaky-catalog")
    with serving_api(csi_env, tmp_path, "--local") as port:
        listing = lambda method, path: "/records" in path or "/directory" in path  # noqa: E731
        with FlakyProxy(f"http://127.0.0.1:{port}", match=listing) as proxy:
            plugin = Plugin(tmp_path, node_config(csi_env, tmp_path, proxy.url), mode="node")
            try:
                yield plugin.start(), proxy
            finally:
                plugin.teardown()


def test_a_view_whose_listing_fails_is_no_not_found_and_the_retry_mounts_it(
    flaky_catalog: tuple[Plugin, FlakyProxy], csi_env: CsiEnv
) -> None:
    plugin, proxy = flaky_catalog
    target = csi_env.target("listing-down")
    proxy.fail_more(10_000)  # every listing request until healed: the mount keeps retrying
    try:
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(target, {"dataset": "imgs", "version": "1", "prefix": "train"}, volume_id="down")
    finally:
        proxy.heal()
    assert proxy.failed > 0  # the mount did ask for its listing, and was failed
    code, details = err.value.code(), err.value.details()
    assert code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE), (code, details)
    assert "'imgs/v1/train' of imgs@v1 cannot be read" in details and "Input/output error" in details, details
    assert "mount.log" in details and "retry" in details, details  # where to look, what happens next
    assert not [p for p in mounts_under(plugin.root) if p.startswith(target)]
    assert [p for p in plugin.state() if p["target_path"] == target] == []
    # the CO retries: the catalog answers again, and the same call mounts the volume
    plugin.publish(target, {"dataset": "imgs", "version": "1", "prefix": "train"}, volume_id="down")
    try:
        assert Path(target, "b.bin").read_bytes() == csi_env.files[1]["train/b.bin"]
    finally:
        plugin.unpublish(target, "down")
