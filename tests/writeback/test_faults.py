"""Faults: a full journal or shared-tier device (real tmpfs), a failing shared tier or origin."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.config import load_config
from datahub.errors import NoSpace, NotFound, StorageError
from datahub.storage import StoreRegistry
from datahub.workspaces import commit_workspace
from tests.faults import FlakyProxy
from tests.tmpfs import small_tmpfs
from tests.writeback.conftest import CHUNK, LAYOUTS, Env, make_env


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs, unmounted in teardown (needs root)."""
    with small_tmpfs(tmp_path / f"tiny-{uuid.uuid4().hex[:6]}", "2m") as mount_point:
        yield mount_point


def fill(directory: Path, leave: int) -> Path:
    """Fill a file system with a ballast file until about ``leave`` bytes remain."""
    st = os.statvfs(directory)
    ballast = directory / "ballast"
    with open(ballast, "wb") as fh:
        fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return ballast


def fill_up(directory: Path) -> Path:
    """Fill a file system to its last block (after ``fill``: a few writes)."""
    more = directory / f"ballast-{uuid.uuid4().hex[:6]}"
    with open(more, "wb", buffering=0) as fh, pytest.raises(OSError) as full:
        while True:
            fh.write(b"\0" * 4096)
    assert full.value.errno == 28
    return more


def write_until_full(ws, limit: int = 2000) -> tuple[dict[str, bytes], NoSpace, str]:
    acked: dict[str, bytes] = {}
    for i in range(limit):
        path = f"f{i}"
        data = os.urandom(CHUNK + i)
        try:
            with ws.open(path, create=True) as fh:
                fh.write(0, data)
        except NoSpace as exc:
            return acked, exc, path
        acked[path] = data
    raise AssertionError("the device never filled up")


def check_acked(ws, acked: dict[str, bytes]) -> None:
    for path, data in acked.items():
        with ws.open(path) as fh:
            assert fh.read(0, len(data) + 1) == data, path


def test_journal_device_full_raises_nospace_and_keeps_acknowledged_files(
    tmp_path: Path, tiny_fs: Path
) -> None:
    env = make_env(tmp_path, journal_dir=str(tiny_fs / "journal"))
    try:
        ws = env.open()
        ballast = fill(tiny_fs, 64_000)
        acked, exc, path = write_until_full(ws)
        assert acked, "some files must fit before the device fills"
        assert "workspace 'ws'" in exc.message and repr(path) in exc.message and exc.errno == 28
        ws.abandon()
        ballast.unlink()  # the operator frees space; the workspace reopens with everything acked
        ws = env.open()
        check_acked(ws, acked)
        ws.flush()
        files = env.origin_files()
        for p, data in acked.items():
            assert files[p] == hashlib.sha256(data).hexdigest()
    finally:
        env.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shared_tier_device_full_raises_nospace_and_keeps_acknowledged_files(
    tmp_path: Path, tiny_fs: Path, layout: str
) -> None:
    env = make_env(tmp_path, shared_url=(tiny_fs / "shared").as_uri(), **LAYOUTS[layout])
    try:
        ws = env.open()
        ballast = fill(tiny_fs, 100_000)
        acked, exc, path = write_until_full(ws)
        assert acked
        assert "shared tier of workspace 'ws'" in exc.message and repr(path) in exc.message
        # nothing half-written was acknowledged: the journal has no record of the new file yet
        assert ws.journal_record(path) == {}
        check_acked(ws, acked)
        ballast.unlink()
        ws2 = env.crash_and_reopen(ws)
        check_acked(ws2, acked)
    finally:
        env.close()


@pytest.fixture
def flaky_env(tmp_path: Path, moto_endpoint) -> Iterator[tuple[Env, FlakyProxy, dict]]:
    """Shared tier and origin on moto behind a proxy whose failures a test switches on and off."""
    shared_bucket = moto_endpoint.new_bucket("wbshared")
    origin_bucket = moto_endpoint.new_bucket("wborigin")
    broken = {"bucket": None}
    proxy = FlakyProxy(
        moto_endpoint.url,
        fail_first=10**9,
        status=500,
        match=lambda method, path: (
            method == "PUT" and broken["bucket"] is not None and broken["bucket"] in path
        ),
    ).start()
    overrides = {
        "home": str(tmp_path / "var"),
        "cache": {"page_size": CHUNK, "flush_interval": 3600, "shared_url": f"s3://{shared_bucket}"},
        **moto_endpoint.s3_config_overrides(),
    }
    overrides["s3"]["endpoint_url"] = proxy.url
    config = load_config(env={}, overrides=overrides)
    env = Env(config, StoreRegistry(config), f"s3://{origin_bucket}/out")
    env.endpoint, env.buckets = moto_endpoint, [shared_bucket, origin_bucket]
    broken["shared"], broken["origin"] = shared_bucket, origin_bucket
    try:
        yield env, proxy, broken
    finally:
        env.close()
        proxy.stop()


def test_failing_shared_tier_fails_close_and_loses_nothing(flaky_env) -> None:
    env, _proxy, broken = flaky_env
    ws = env.open()
    with ws.open("ok", create=True) as fh:
        fh.write(0, b"safe" * 3000)
    fh = ws.open("bad", create=True)
    fh.write(0, b"pending" * 2000)
    broken["bucket"] = broken["shared"]
    with pytest.raises(StorageError) as exc:
        fh.close()
    assert "workspace 'ws'" in exc.value.message and "'bad'" in exc.value.message
    assert fh.read(0, 7) == b"pending"  # still open, data still there
    assert ws.journal_record("bad") == {}  # nothing half-written acknowledged (not even the create)
    broken["bucket"] = None
    fh.close()  # the retry succeeds
    ws2 = env.crash_and_reopen(ws)
    check_acked(ws2, {"ok": b"safe" * 3000, "bad": b"pending" * 2000})


def test_failing_origin_fails_flush_and_keeps_files_dirty(flaky_env) -> None:
    env, _proxy, broken = flaky_env
    ws = env.open()
    with ws.open("x", create=True) as fh:
        fh.write(0, os.urandom(3 * CHUNK))
    broken["bucket"] = broken["origin"]
    with pytest.raises(StorageError):
        ws.flush()
    assert ws.dirty() == ["x"]
    broken["bucket"] = None
    assert ws.flush().uploaded == 1 and ws.dirty() == []


def test_a_new_file_whose_close_failed_on_a_full_journal_device_is_never_committed_later(
    tmp_path: Path, tiny_fs: Path, catalog
) -> None:
    """docs/writeback.md, "Out of space at close": a created file nothing of which was ever
    acknowledged, whose close failed because the journal's device is full, is dropped from
    the overlay without a journal write (its removal could not be journaled either). Neither
    the space coming back, nor a namespace operation, nor the workspace's close (the mount's
    unmount), nor a commit, nor a crash brings it back; its handle writes nothing more."""
    env = make_env(tmp_path, journal_dir=str(tiny_fs / "journal"))
    try:
        ws = env.open()
        ballast = fill(tiny_fs, 64_000)
        # a reader (a listing, the flusher) keeps LMDB from reusing the pages later commits
        # free, so even the smallest write transaction needs a new page now
        # other created files, open and not yet closed: a namespace transaction journals them
        # all, so the removal of the failed file needs more pages than its failed commit left
        held = [ws.open(f"open{k:03}", create=True) for k in range(300)]
        with ws.journal.read():
            acked: dict[str, bytes] = {}
            for i in range(2000):
                path, data = f"f{i}", os.urandom(CHUNK + i)
                fh = ws.open(path, create=True)
                fh.write(0, data)
                try:
                    fh.close()
                except NoSpace:
                    break
                acked[path] = data
            else:
                raise AssertionError("the journal's device never filled up")
            more = fill_up(tiny_fs)  # to its last block: the removal cannot be journaled either
            assert ws.revert(path) is True  # main before the fix: NoSpace (its unlink is a journal write)
        with pytest.raises(NotFound):
            ws.stat(path)
        others = sorted([*acked, *(h.path for h in held)])
        assert sorted(name for name, _ in ws.listdir("")) == others
        with pytest.raises(NoSpace) as exc:
            fh.write(0, b"more")  # the handle is still open (as the kernel's may be)
        assert repr(path) in exc.value.message and exc.value.errno == 28
        with pytest.raises(NoSpace):
            fh.fsync()
        ballast.unlink()  # the space comes back
        more.unlink()
        ws.mkdir("after")  # a namespace operation journals every pending file: not this one
        with pytest.raises(NoSpace):
            fh.fsync()
        with pytest.raises(NotFound):
            ws.stat(path)
        for handle in held:
            handle.close()
        commit_workspace(ws, catalog, "out")
        assert sorted(r.key for r in catalog.list_records("out", None)) == others
        ws.close()  # commits the open files (the unmount's final close): not this one
        ws = env.open()
        with pytest.raises(NotFound):
            ws.stat(path)
        check_acked(ws, acked)
        ws = env.crash_and_reopen(ws)
        with pytest.raises(NotFound):
            ws.stat(path)
        check_acked(ws, acked)
        ws.close()
    finally:
        env.close()
