"""``FuseEnv.umount`` (every ``env.mounted`` block's teardown) does what ``datahub umount``
does, in the test's process (suiteA27: a Python start-up per workspace teardown was 0.4-0.6
CPU-s): a workspace whose daemon was killed is recovered from its journal and committed to
its ``--commit-to`` as the mount's ``--author``; a daemon that finished is not recovered
again (one version, not two); nothing is left mounted and no mount record stays behind.

The command itself keeps its own tests (``env.cli("umount", ...)``: tests/fuse/test_workspace.py,
test_umount_finished15.py, test_wbreview24.py …).
"""

from __future__ import annotations

import os
import signal

import pytest

from fuse_adapter.daemon import is_mounted, read_record
from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace import _catalog

pytestmark = pytest.mark.fuse


def test_a_killed_workspace_is_recovered_and_committed_by_the_teardown(env: FuseEnv) -> None:
    mnt = env.mountpoint("killed")
    with _catalog(env) as catalog:
        catalog.create_dataset("outputs")
    data = os.urandom(70_000)
    with env.mounted(mnt, "--workspace", "ws27", "--commit-to", "outputs", "--author", "carol") as proc:
        (mnt / "model.bin").write_bytes(data)  # acknowledged by its close, then the daemon dies
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not is_mounted(str(mnt))
    assert read_record(env.config.home_path, str(mnt)) is None
    with _catalog(env) as catalog:
        version = catalog.resolve("outputs")
        records = {r.key: r.size for r in catalog.list_records("outputs", None)}
    assert records == {"model.bin": len(data)}
    assert version.author == "carol" and version.message == "workspace ws27"


def test_a_stopped_workspace_commits_once_and_leaves_no_record(env: FuseEnv) -> None:
    mnt = env.mountpoint("stopped")
    with _catalog(env) as catalog:
        catalog.create_dataset("outputs")
    with env.mounted(mnt, "--workspace", "ws27b", "--commit-to", "outputs"):
        (mnt / "a.txt").write_bytes(b"kept")
    assert not is_mounted(str(mnt))
    assert read_record(env.config.home_path, str(mnt)) is None
    with _catalog(env) as catalog:
        assert [v.seq for v in catalog.log("outputs")] == [1]  # the daemon's commit, no second one
        assert {r.key: r.size for r in catalog.list_records("outputs", None)} == {"a.txt": 4}
