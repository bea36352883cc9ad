"""NodePublishVolume of a view that cannot be read is not NOT_FOUND.

The plugin checked the view (``DATASET/vN/PREFIX`` of its mount) with ``os.path.isdir``,
which says False for every error: a mount whose listing could not be loaded (the catalog did
not answer; lookups answer EIO, never ENOENT) was reported to the kubelet as NOT_FOUND "not a
directory of imgs@v1 (check the prefix attribute)", as if the volume did not exist.

A real API server as the plugin's catalog, behind a proxy that fails the mount's listing
requests; the kubelet's side is the gRPC socket.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Plugin, mounts_under
from tests.faults import FlakyProxy
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module")
def flaky_catalog(
    csi_env: CsiEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Plugin, FlakyProxy]]:
    """A node plugin whose catalog is ``datahub serve --local`` (loopback) through a proxy that
    fails the listing requests it is armed for (``…/records``, ``…/directory``), and only those."""
    tmp_path = tmp_path_factory.mktemp("flaky-catalog")
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    environ["DATAHUB_CONFIG"] = str(csi_env.config_path)
    serve = [
        str(Path(sys.executable).with_name("datahub")),
        "serve",
        "--local",
        "--port",
        str(port),
        "--no-labelx",
    ]
    with open(tmp_path / "serve.log", "ab") as log:
        server = subprocess.Popen(serve, stdout=log, stderr=log, env=environ)
    plugin = None
    try:
        wait_for_port(port)
        listing = lambda method, path: "/records" in path or "/directory" in path  # noqa: E731
        with FlakyProxy(f"http://127.0.0.1:{port}", match=listing) as proxy:
            config_path = tmp_path / "plugin.toml"
            config_path.write_text(
                csi_env.config_path.read_text().replace(
                    f'home = "{csi_env.root / "var"}"\n',
                    f'home = "{tmp_path / "node"}"\ncatalog_url = "{proxy.url}"\n',
                )
            )
            plugin = Plugin(tmp_path, config_path, mode="node")
            yield plugin.start(), proxy
    finally:
        if plugin is not None:
            plugin.teardown()
        server.terminate()
        server.wait(30)


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
