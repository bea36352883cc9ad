"""review17c through real mounts: ``datahub mount --workspace --commit-to`` and ``datahub umount``.

A file a user labeled after a workspace committed it is kept when the workspace deletes it
later, though a commit came between (docs/writeback.md, "A commit applies the workspace's
changes"; the same case in process: ``tests/writeback/test_review17c.py``).
"""

from __future__ import annotations

import pytest

from datahub.catalog import Patch, open_catalog
from fuse_adapter.daemon import unmount
from tests.fuse.conftest import FuseEnv

pytestmark = pytest.mark.fuse


def test_a_file_labeled_between_two_umount_commits_survives_the_workspaces_delete(env: FuseEnv) -> None:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("out17c")
        mnt = env.mountpoint("ws17c")

        def session(change) -> str:
            with env.mounted(mnt, "--workspace", "ws17c", "--commit-to", "out17c") as proc:
                change()
                stopped = unmount(env.config.home_path, str(mnt), timeout=120)
                proc.wait(30)
            return stopped.outcome

        def first() -> None:
            (mnt / "sample.png").write_bytes(b"a sample a user will label")
            (mnt / "log.txt").write_bytes(b"epoch 1\n")

        assert "out17c@v1" in session(first)
        catalog.commit("out17c", [Patch("sample.png", labels={"class": "cat"})], message="a user's label")
        assert "out17c@v3" in session(lambda: (mnt / "log.txt").write_bytes(b"epoch 1\nepoch 2\n"))
        assert "out17c@v3" in session(lambda: (mnt / "sample.png").unlink())  # nothing of ours to delete
        head = {r.key: dict(r.labels) for r in catalog.list_records("out17c")}
        assert head == {"log.txt": {}, "sample.png": {"class": "cat"}}
    finally:
        catalog.close()
