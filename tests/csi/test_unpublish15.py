"""A workspace whose mount process flushed and committed it is not opened again by the plugin
(unpublish15): the daemon's word (``fuse_adapter.daemon.write_finished``) ends the unpublish,
where the plugin used to reopen the workspace twice (journal replay, writer lease, a flush
check and a commit that found nothing to do) for seconds per pod. The paths without that
word (a failed flush, a refused commit) are test_unpublish_flush.py's and test_csinode15.py's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin, handed_clean

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


@pytest.fixture
def api_plugin(plugin: Plugin) -> Iterator[Plugin]:
    yield from handed_clean(plugin)


def test_a_workspace_its_daemon_committed_is_not_reopened_by_the_plugin(
    api_plugin: Plugin, csi_env: CsiEnv
) -> None:
    target = csi_env.target("ws15")
    api_plugin.publish(target, {"workspace": "run-15", "commitTo": "outputs15"}, volume_id="ws-15")
    Path(target, "a.txt").write_bytes(b"alpha")
    Path(target, "b.txt").write_bytes(b"beta!")
    start = api_plugin.log_path.stat().st_size
    api_plugin.unpublish(target, "ws-15")
    with open(api_plugin.log_path, "rb") as fh:
        fh.seek(start)
        said = fh.read().decode(errors="replace")
    assert "its files are outputs15@v1" in said, said  # the daemon's own commit, reported
    # csi/finish.py's reopen logs what it found (datahub.workspaces.finish_workspace): it did not run
    assert "workspace run-15 is " not in said, said
    assert not os.path.exists(target)
    assert not [p for p in api_plugin.state() if p["target_path"] == target]
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        assert {r.key: r.size for r in catalog.list_records("outputs15", None)} == {"a.txt": 5, "b.txt": 5}
    finally:
        catalog.close()
