"""review16: an adversarial review of unpublish15 (the plugin stops a volume's mount daemon
in-process, and trusts the daemon's "finished" word to skip reopening the workspace).

The promise under attack: an unpublish that returns OK leaves every file the pod's processes
had acknowledged (fsync or close returned) in the version it reports, and a daemon that did
not finish its flush and commit is never taken for one that did. Driven as the kubelet does:
over the plugin's gRPC socket, real FUSE mounts, moto as the object store, the SQLite catalog
the daemon and the plugin share.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin, mounts_under, wait_until
from tests.csi.test_csi14 import quiet_module_plugin, quiet_plugin

pytestmark = [pytest.mark.fuse, pytest.mark.slow]
# test_csi14's plugin with only its start-up pass: a daemon a test kills is not remounted under
# the unpublish being checked (test_review15a's lesson)
__all__ = ["quiet_module_plugin", "quiet_plugin"]  # the fixtures, used by name

HANG_GUARD = 120.0  # seconds: only a guard against a hang, never a measure of speed


def _versions(csi_env: CsiEnv, dataset: str) -> tuple[int, dict[str, bytes]]:
    """(head version, key -> bytes of its files)."""
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        head = catalog.store.head(dataset)
        records = list(catalog.list_records(dataset, None)) if head else []
    finally:
        catalog.close()
    s3 = csi_env.endpoint.client()
    prefix = f"s3://{csi_env.bucket}/"
    return head, {
        r.key: s3.get_object(Bucket=csi_env.bucket, Key=r.url[len(prefix) :])["Body"].read() for r in records
    }


def _origin_keys(csi_env: CsiEnv, workspace: str) -> set[str]:
    s3 = csi_env.endpoint.client()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=csi_env.bucket, Prefix="objects/")
    return {o["Key"] for page in pages for o in page.get("Contents", []) if f"/{workspace}/" in o["Key"]}


def _logged_during(plugin: Plugin, call) -> str:
    """What the plugin logged while ``call`` ran."""
    start = plugin.log_path.stat().st_size
    call()
    with open(plugin.log_path, "rb") as fh:
        fh.seek(start)
        return fh.read().decode(errors="replace")


def _catalog_path(csi_env: CsiEnv) -> str:
    url = csi_env.config.resolved_catalog_url
    assert url.startswith("sqlite:///"), url
    return url[len("sqlite:///") :]


def test_a_daemon_killed_between_its_flush_and_its_word_is_finished_by_the_plugin(
    quiet_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The daemon flushes, then its commit waits for the catalog (another writer holds it), and
    it is killed -9 there: flushed, never committed, no word. The unpublish must not take it
    for finished: the plugin reopens the workspace and commits every file, once."""
    target = csi_env.target("killed16")
    quiet_plugin.publish(target, {"workspace": "killed16", "commitTo": "out-killed16"}, volume_id="killed16")
    Path(target, "a.txt").write_bytes(b"alpha" * 1000)
    Path(target, "b.txt").write_bytes(b"beta")
    [record] = [p for p in quiet_plugin.state() if p["target_path"] == target]
    daemon_pid = record["pid"]
    blocker = sqlite3.connect(_catalog_path(csi_env), timeout=60, isolation_level=None)
    outcome: list[object] = []

    def unpublish() -> None:
        try:
            outcome.append(quiet_plugin.unpublish(target, "killed16"))
        except BaseException as exc:  # reported by the test
            outcome.append(exc)

    blocker.execute("BEGIN IMMEDIATE")  # the catalog's write lock: the daemon's commit waits for it
    caller = threading.Thread(target=unpublish)
    try:
        caller.start()
        wait_until(lambda: len(_origin_keys(csi_env, "killed16")) >= 2, HANG_GUARD, "the daemon's flush")
        os.kill(daemon_pid, signal.SIGKILL)  # flushed; its commit waits on the lock; no word yet
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        caller.join(HANG_GUARD + 180)
    assert not caller.is_alive(), "the unpublish never returned"
    [answer] = outcome
    assert not isinstance(answer, BaseException), answer
    head, files = _versions(csi_env, "out-killed16")
    assert head == 1, f"{head} versions: the killed daemon's commit, or the plugin's, is missing or doubled"
    assert files == {"a.txt": b"alpha" * 1000, "b.txt": b"beta"}
    assert not [p for p in quiet_plugin.state() if p["target_path"] == target]
    assert mounts_under(Path(target).parent) == []


def test_an_fsync_during_the_unmount_is_either_refused_or_in_the_version(
    quiet_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """A second process keeps appending to a workspace file and fsyncing it while the volume is
    unpublished. Whatever moment the daemon stops answering, every fsync that returned must be
    in the version the daemon's word reports (the plugin no longer reopens to re-check); the
    ones after it fail (ENOTCONN or EIO), never succeed unseen.

    The writer holds the daemon's own mount (the plugin's private mount point), not the pod's
    target: a process on the target makes the unpublish FAILED_PRECONDITION ("target is
    busy", the CO retries), so only a process beside the pod can still write once it began."""
    target = csi_env.target("fsync16")
    quiet_plugin.publish(target, {"workspace": "fsync16", "commitTo": "out-fsync16"}, volume_id="fsync16")
    block = b"0123456789abcdef" * 256  # 4 KiB
    acked = [0]
    started = threading.Event()
    failure: list[BaseException] = []
    [record] = [p for p in quiet_plugin.state() if p["target_path"] == target]
    fd = os.open(os.path.join(record["volume_dir"], "mnt", "log.bin"), os.O_WRONLY | os.O_CREAT, 0o644)

    def append() -> None:
        try:
            while True:
                os.write(fd, block)
                os.fsync(fd)
                acked[0] += len(block)
                if acked[0] >= 8 * len(block):
                    started.set()
        except OSError as exc:  # the daemon stopped answering: the end of this writer
            failure.append(exc)
        finally:
            started.set()
            with contextlib.suppress(OSError):
                os.close(fd)

    writer = threading.Thread(target=append, daemon=True)
    writer.start()
    assert started.wait(HANG_GUARD)
    quiet_plugin.unpublish(target, "fsync16")
    writer.join(HANG_GUARD)
    assert not writer.is_alive(), "the writer's fsync never returned after the unmount"
    assert failure, "the writer never failed: it wrote on into a volume that was unpublished"
    head, files = _versions(csi_env, "out-fsync16")
    assert head == 1
    data = files["log.bin"]
    assert len(data) >= acked[0], f"fsync acknowledged {acked[0]} bytes; the version holds {len(data)}"
    assert data == (block * (len(data) // len(block) + 1))[: len(data)]
    assert not [p for p in quiet_plugin.state() if p["target_path"] == target]


def test_a_finished_daemon_left_its_journal_closed_clean_and_its_lease_released(
    quiet_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The daemon now ends with ``os._exit`` after its atexit handlers (unpublish15), and the
    plugin no longer reopens the workspace after it (a reopen recorded its own clean close and
    released its own lease). What the daemon's own close must have done before it exited: its
    journal records a clean close (else the next open replays the packs' cover records), and
    its writer lease is released at once (else the workspace's next mount, on any node, waits
    for it to lapse)."""
    from datahub.writeback import workspace_dir
    from datahub.writeback.journal import OWNER_BOOT, Journal

    target = csi_env.target("exit16")
    quiet_plugin.publish(target, {"workspace": "exit16", "commitTo": "out-exit16"}, volume_id="exit16")
    Path(target, "a.txt").write_bytes(b"alpha")
    said = _logged_during(quiet_plugin, lambda: quiet_plugin.unpublish(target, "exit16"))
    assert "its files are out-exit16@v1" in said, said  # the daemon's word: no reopen by the plugin
    assert _versions(csi_env, "out-exit16") == (1, {"a.txt": b"alpha"})
    journal = Journal(workspace_dir(csi_env.config, "exit16") / "lmdb", "exit16", readonly=True)
    try:
        with journal.read() as txn:
            assert txn.meta(OWNER_BOOT) == "", "the daemon exited without recording its clean close"
    finally:
        journal.close()
    db = sqlite3.connect(f"{_catalog_path(csi_env)}.leases")  # the leases' own file
    try:
        rows = db.execute(
            "SELECT name, owner, expires FROM leases WHERE name LIKE ?", ("%exit16%",)
        ).fetchall()
    finally:
        db.close()
    assert rows and all(expires <= 0 for _name, _owner, expires in rows), rows
