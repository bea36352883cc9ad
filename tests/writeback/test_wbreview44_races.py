"""wbreview44: a close or fsync that returned 0 must have journaled every change made before
it was called, and must leave every change made while it ran for the next close.

Five interleavings of ``OpenFile`` (``datahub/writeback/files.py``) broke that: the commit
journaled older bytes or an older size than the file had when the fsync was called, or it
cleared the file's dirty state of a change that came in while it ran, so the next close
committed nothing. Each is forced here in the order that broke it: an upload or a journal
commit is held on an event until the other thread's write or truncate is done, never by
timing. The fifth, on the mount's view, is the handle's own "wrote since its last fsync"
mark (``WorkspaceView._dirty``) cleared of a write made during that fsync.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from datahub.errors import NoSpace
from datahub.writeback import Workspace
from fuse_adapter.quota import Quota
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import CHUNK, Env

OLD = b"o" * (2 * CHUNK + 100)  # the file's acknowledged bytes before each test's changes
#: where its last chunk (100 bytes) begins. A write into a full chunk fills its buffer, which
#: starts a write-behind upload at once; the fsync's own uploads are of partial chunks
TAIL = 2 * CHUNK


class Held:
    """The first call of ``obj.name`` (in a thread whose name starts with ``thread``, or in
    any) waits for ``go`` before it runs (``after``: once it has run), saying so with
    ``entered``; every other call runs through. Put back, and ``go`` set, on exit."""

    def __init__(self, obj: object, name: str, thread: str | None = None, *, after: bool = False) -> None:
        self.obj, self.name, self.thread, self.after = obj, name, thread, after
        self.real: Callable = getattr(obj, name)
        self.entered, self.go = threading.Event(), threading.Event()
        self._once = threading.Lock()

    def _ours(self) -> bool:
        if self.thread is not None and not threading.current_thread().name.startswith(self.thread):
            return False
        return self._once.acquire(blocking=False)

    def __call__(self, *args, **kwargs):
        ours = self._ours()
        if ours and not self.after:
            self.entered.set()
            assert self.go.wait(30), "never released"
        out = self.real(*args, **kwargs)
        if ours and self.after:
            self.entered.set()
            assert self.go.wait(30), "never released"
        return out

    def __enter__(self) -> Held:
        setattr(self.obj, self.name, self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.go.set()
        setattr(self.obj, self.name, self.real)


@contextmanager
def running(fn: Callable[[], object], name: str = "racer") -> Iterator[list]:
    """Run ``fn`` in a thread named ``name``; on exit it must have ended (its error raised)."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # reported by the test's thread
            out.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        thread.join(30)
    assert not thread.is_alive(), f"{name} never returned"
    if out and isinstance(out[0], BaseException):
        raise out[0]


def _acked(ws: Workspace, data: bytes = OLD) -> None:
    with ws.open("f", create=True) as fh:
        fh.write(0, data)


def _content(ws: Workspace, path: str = "f") -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size + CHUNK)


def _after_crash(env: Env, ws: Workspace) -> bytes:
    ws = env.crash_and_reopen(ws)
    try:
        return _content(ws)
    finally:
        ws.close()


# --- 1. a truncate while a commit of the file runs ------------------------------------------------
@pytest.mark.parametrize("size", [CHUNK, 3 * CHUNK], ids=["shrink", "grow"])
def test_a_truncate_during_another_handles_commit_is_committed_by_its_close(env: Env, size: int) -> None:
    """Handle a's close commits; meanwhile handle b truncates (at a chunk boundary, or
    growing: no chunk changes, only the size) and closes. Before: a's commit cleared the
    file's "size changed" mark when it ended, so b's close found nothing to commit and
    returned 0 with the journal holding the size from before the truncate."""
    ws = env.open()
    _acked(ws)
    a, b = ws.open("f"), ws.open("f")
    a.write(0, b"a" * 10)
    with Held(ws.commits, "commit_file") as commit, running(a.close):
        assert commit.entered.wait(30)
        b.truncate(size)
        commit.go.set()
    b.close()
    expected = (b"a" * 10 + OLD[10:])[:size].ljust(size, b"\0")
    assert ws.journal_record("f")["size"] == size, "b's close returned 0, its truncate not journaled"
    assert _after_crash(env, ws) == expected


@pytest.mark.parametrize("size", [CHUNK, 3 * CHUNK], ids=["shrink", "grow"])
def test_a_truncate_by_path_during_a_commit_is_committed_when_it_returns(env: Env, size: int) -> None:
    """``Workspace.truncate`` (the mount's ``truncate(2)`` with no writer open) while a
    writer's close commits: it returned, and after a crash the file had its old size."""
    ws = env.open()
    _acked(ws)
    a = ws.open("f")
    a.write(0, b"a" * 10)
    with Held(ws.commits, "commit_file", "closer") as commit, running(a.close, "closer"):
        assert commit.entered.wait(30)
        with running(lambda: ws.truncate("f", size), "truncater"):
            while ws.stat("f").size != size:  # the cut is made; its close waits for a's commit
                threading.Event().wait(0.01)
            commit.go.set()
    assert ws.journal_record("f")["size"] == size, "the truncate returned but was not journaled"
    assert _after_crash(env, ws) == (b"a" * 10 + OLD[10:])[:size].ljust(size, b"\0")


# --- 2. a rewrite during a commit, the chunk uploaded by write-behind -----------------------------
def test_a_chunk_rewritten_and_uploaded_during_a_commit_stays_to_commit(env: Env) -> None:
    """Chunk 0 uploaded ahead of the fsync (write-behind: a full chunk) is in the fsync's
    chunk map; while the journal commits it, the chunk is written full again and uploaded
    again. Before: the commit took chunk 0 off the "uploaded, not journaled" set when it
    ended, although it was the newer upload there now: the close after it committed nothing,
    and the journal kept the older bytes."""
    ws = env.open()
    a = ws.open("f", create=True)
    a.write(0, b"a" * CHUNK)
    a.fsync()
    a.write(0, b"b" * CHUNK)  # full: its write-behind upload runs
    a._of._wait_uploads()
    with Held(ws.commits, "commit_file") as commit, running(a.fsync):
        assert commit.entered.wait(30)
        a.write(0, b"c" * CHUNK)  # acknowledged by the close below
        a._of._wait_uploads()
        commit.go.set()
    a.close()
    assert _after_crash(env, ws) == b"c" * CHUNK


# --- 3. a write during an fsync's upload -----------------------------------------------------------
@pytest.mark.parametrize("then", ["crash", "close"])
def test_a_write_during_an_fsyncs_upload_keeps_what_the_fsync_acknowledged(env: Env, then: str) -> None:
    """The fsync uploads the file's last chunk (partial: a full one went by write-behind),
    holding a write made before it; another write into that chunk lands during the upload.
    Before: the upload was thrown away as outdated and the fsync committed the chunk's
    *older* journaled bytes, returning 0 without the write made before it. The later write
    must stay for the next close."""
    ws = env.open()
    _acked(ws)
    a = ws.open("f")
    a.write(TAIL, b"a" * 50)  # before the fsync: it must be in what the fsync commits
    with Held(ws.chunks, "put") as put, running(a.fsync):
        assert put.entered.wait(30)
        a.write(TAIL + 60, b"b" * 10)
        put.go.set()
    if then == "crash":
        assert _after_crash(env, ws)[TAIL : TAIL + 50] == b"a" * 50, (
            "fsync returned 0 without the write before it"
        )
        return
    a.close()
    assert _after_crash(env, ws) == OLD[:TAIL] + b"a" * 50 + b"o" * 10 + b"b" * 10 + b"o" * 30


def test_a_handle_that_wrote_during_its_fsync_is_still_marked_as_having_written(env: Env) -> None:
    """On the mount's view: handle b writes during its own fsync, then handle a's close is
    refused for space and reverts the file to that fsync's commit, dropping b's later write.
    Before: b's fsync cleared b's "wrote since its last fsync" mark when it ended, so the
    revert did not refuse b's close, which returned 0 with its bytes gone."""
    ws = env.open()
    view = WorkspaceView(ws, quota=Quota(64))
    fh, _, _, _ = view.create(ROOT_INODE, "f", exclusive=False)
    view.write(fh, 0, b"acked")
    view.flush(fh)
    view.release(fh)
    ino = view.lookup(ROOT_INODE, "f").ino
    a, _, _ = view.open(ino, truncate=False)
    b, _, _ = view.open(ino, truncate=False)
    view.write(b, 0, b"B1")
    with Held(ws.commits, "commit_file", "fsyncer") as commit, running(lambda: view.fsync(b), "fsyncer"):
        assert commit.entered.wait(30)
        view.write(b, 2, b"B2")  # after the fsync's snapshot: only b's close acknowledges it
        commit.go.set()
    with pytest.raises(NoSpace):
        view.write(a, 0, os.urandom(100))  # a is short: its close is refused and reverts
    with pytest.raises(NoSpace):
        view.flush(a)
    view.release(a)
    try:
        view.flush(b)
    except NoSpace:
        refused = True
    else:
        refused = False
    view.release(b)
    if not refused:
        assert _content(ws).startswith(b"B1B2"), "b's close returned 0 and its write is gone"
    ws.close()


# --- 4. a write-behind upload in flight when the fsync looks ---------------------------------------
def test_an_fsync_waits_for_a_write_behind_upload_that_started_after_it_began(env: Env) -> None:
    """A write made before the fsync sits in chunk 0's buffer; after the fsync waited for
    the file's uploads, another write fills chunk 0, whose write-behind upload takes the
    buffer away. Before: the fsync skipped chunk 0 (no buffer) and committed its older
    journaled bytes: the write made before the fsync was not in what it acknowledged."""
    ws = env.open()
    _acked(ws)
    a = ws.open("f")
    of = a._of
    a.write(TAIL, b"a" * 50)  # the last chunk, partial: no write-behind yet
    # the file's uploads waited for, the fsync pauses; the write-behind upload (in the
    # workspace's pool, threads "wb-...") is held
    with (
        Held(of, "_wait_uploads", "fsyncer", after=True) as waited,
        Held(ws.chunks, "put", "wb-") as put,
        running(a.fsync, "fsyncer") as done,
    ):
        assert waited.entered.wait(30)
        a.write(TAIL + 100, b"b" * (CHUNK - 100))  # fills the chunk: its upload starts, held
        assert put.entered.wait(30)
        waited.go.set()
        for _ in range(50):  # before: the fsync returned without that upload
            if done:
                break
            threading.Event().wait(0.02)
        put.go.set()
    assert _after_crash(env, ws)[TAIL : TAIL + 50] == b"a" * 50, (
        "fsync returned 0 without the write before it"
    )


# --- 5. a truncate cutting a chunk during the fsync's upload ---------------------------------------
@pytest.mark.parametrize("then", ["crash", "close"])
def test_a_truncate_cutting_a_chunk_during_an_fsyncs_upload(env: Env, then: str) -> None:
    """The fsync uploads chunk 0 (a write made before it); another handle truncates the file
    into chunk 0 meanwhile. Before: the fsync committed the new size with chunk 0's *older*
    journaled object, a whole chunk: the write before the fsync was gone, and bytes past the
    cut came back when the file grew again."""
    ws = env.open()
    _acked(ws)
    a, b = ws.open("f"), ws.open("f")
    a.write(TAIL, b"a" * 80)
    with Held(ws.chunks, "put") as put, running(a.fsync):
        assert put.entered.wait(30)
        b.truncate(TAIL + 40)
        put.go.set()
    if then == "crash":
        ws = env.crash_and_reopen(ws)
        data = _content(ws)
        before, after = OLD[:TAIL] + b"a" * 80 + b"o" * 20, OLD[:TAIL] + b"a" * 40
        assert data in (before, after), "the fsync lost the write made before it"
        with ws.open("f") as fh:  # grown again: past the size, only zeros
            fh.truncate(len(data) + 300)
            assert fh.read(0, len(data) + 300) == data + bytes(300)
        ws.close()
        return
    a.close()
    b.close()
    ws = env.crash_and_reopen(ws)
    assert _content(ws) == OLD[:TAIL] + b"a" * 40
    with ws.open("f") as fh:
        fh.truncate(TAIL + 400)
        assert fh.read(0, TAIL + 400) == OLD[:TAIL] + b"a" * 40 + bytes(360)
    ws.close()
