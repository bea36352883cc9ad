"""A workspace daemon that flushed, committed and closed says so, and ``unmount`` then skips
reopening the workspace (unpublish15: the reopen cost each CSI unpublish seconds); a dead
daemon's word is never taken for it (promise 3)."""

from __future__ import annotations

import os
import signal

import pytest

from datahub.catalog import open_catalog
from fuse_adapter.daemon import MountRecord, read_record, record_path, unmount
from tests.fuse.conftest import FuseEnv

pytestmark = pytest.mark.fuse


def _recover_calls(calls: list[MountRecord]):
    def recover(record: MountRecord) -> str:
        calls.append(record)
        return "re-checked"

    return recover


def _committed(env: FuseEnv, dataset: str) -> dict[str, int]:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        return {r.key: r.size for r in catalog.list_records(dataset, "latest")}
    finally:
        catalog.close()


def _create(env: FuseEnv, dataset: str) -> None:
    """The catalog (and the dataset) a ``--commit-to`` mount needs to start."""
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset(dataset)
    finally:
        catalog.close()


def test_a_daemon_that_committed_says_so_and_unmount_does_not_reopen(env: FuseEnv) -> None:
    _create(env, "out15")
    mnt = env.mountpoint("finished")
    with env.mounted(mnt, "--workspace", "fin15", "--commit-to", "out15") as proc:
        (mnt / "a.txt").write_bytes(b"alpha")
        (mnt / "b.txt").write_bytes(b"beta!")
        calls: list[MountRecord] = []
        stopped = unmount(env.config.home_path, str(mnt), timeout=120, recover=_recover_calls(calls))
        proc.wait(30)
    assert calls == []  # the daemon's own flush and commit were not re-checked by a reopen
    assert stopped.finished
    assert "out15@v1" in stopped.outcome, stopped.outcome
    assert _committed(env, "out15") == {"a.txt": 5, "b.txt": 5}
    assert not record_path(env.config.home_path, str(mnt)).with_suffix(".finished").exists()


def test_a_killed_daemons_word_is_not_trusted(env: FuseEnv) -> None:
    """A word with the dead daemon's own pid (as if it wrote it, then was killed while its mount
    still stood) does not stand in for the recovery: only a live daemon stopped by this unmount
    is believed."""
    _create(env, "out15k")
    mnt = env.mountpoint("killed")
    with env.mounted(mnt, "--workspace", "fin15k", "--commit-to", "out15k") as proc:
        (mnt / "a.txt").write_bytes(b"alpha")
        record = read_record(env.config.home_path, str(mnt))
        assert record is not None and record.pid == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        # the dead daemon's pid on a word in its place: the daemon never committed anything
        path = record_path(env.config.home_path, str(mnt)).with_suffix(".finished")
        path.write_text(f'{{"pid": {proc.pid}, "said": "forged"}}')
        calls: list[MountRecord] = []
        stopped = unmount(env.config.home_path, str(mnt), timeout=120, recover=_recover_calls(calls))
    assert [c.workspace for c in calls] == ["fin15k"]
    assert stopped.finished and "forged" not in stopped.outcome
    assert not path.exists()
