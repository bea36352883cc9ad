"""A revert (a close refused for space, docs/writeback.md "Out of space at close") racing
another handle's fsync of the same file (revert13): whatever that fsync acknowledged (it
returned 0) is the file after the revert and after a crash; a revert never removes it nor
puts the file back to an older record. Before the fix the revert read the file's record,
decided, then removed or reverted in a later step, and an fsync landing in between was lost.

Each race is forced, not hoped for: the other handle's fsync is started at the point where
the revert has read the record and not yet acted (a hook on the overlay call it makes
there), and the hook goes on as soon as that fsync has either returned or is waiting for the
file's commit lock (``WatchedLock``), so nothing depends on timing. Both outcomes are
allowed by POSIX (the fsync first, or the revert first and the fsync then refused); the
assertions hold for each, and the old code took the first and lost the bytes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

from datahub.errors import NoSpace, NotFound
from datahub.writeback import Workspace
from datahub.writeback.files import FileHandle
from tests.writeback.conftest import CHUNK, Env


class WatchedLock:
    """A file's commit lock that tells when a thread has to wait for it (``waiting``)."""

    def __init__(self, lock: threading.Lock, waiting: threading.Event) -> None:
        self._lock, self.waiting = lock, waiting
        self.waited = False  # some thread found it held and waited

    def acquire(self, blocking: bool = True) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        self.waited = True
        self.waiting.set()
        return self._lock.acquire()

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class Race:
    """Runs ``action`` in another thread once, at a hook; the hook returns when the action
    is done or waits for the file's commit lock. ``outcome``: "ok" or the exception."""

    def __init__(self, fh: FileHandle, action: Callable[[], object]) -> None:
        self.settled = threading.Event()
        of = fh._of
        self.lock = of._commit_lock = WatchedLock(of._commit_lock, self.settled)
        self.action = action
        self.outcome: object = None
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        try:
            self.action()
            self.outcome = "ok"
        except BaseException as exc:
            self.outcome = exc
        finally:
            self.settled.set()

    def fire(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run)
            self.thread.start()
            assert self.settled.wait(60), "the raced action neither finished nor waited for the lock"

    def hook(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
        """Fire before the first call of ``owner.name`` made by this thread."""
        original = getattr(owner, name)
        me = threading.get_ident()

        def hooked(*args, **kwargs):
            if threading.get_ident() == me:
                self.fire()
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, hooked)

    def join(self) -> tuple[object, bool]:
        """(the action's outcome, whether it waited for the lock: the other side went first)."""
        assert self.thread is not None, "the hook never fired: the race was not run"
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.outcome, self.lock.waited


def _names(ws: Workspace) -> list[str]:
    return sorted(name for name, _ in ws.listdir(""))


def _content(ws: Workspace, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size)


def test_a_file_a_namespace_operation_journaled_unacked_keeps_what_a_racing_fsync_acknowledged(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file has an ``unacked`` record (journaled empty by a mkdir): the revert decides
    to remove it; another handle's fsync lands between that decision and the removal and
    returns 0. Before the fix the file was removed (after the revert and after a crash)."""
    ws = env.open()
    a = ws.open("f", create=True)
    a.write(0, os.urandom(2 * CHUNK + 5))
    ws.mkdir("d")  # journals f, empty and unacknowledged
    b = ws.open("f")
    b.write(CHUNK, b"written through b")
    expected = b.read(0, 3 * CHUNK)
    race = Race(b, b.fsync)
    race.hook(monkeypatch, ws.overlay, "begin_namespace")  # the removal's transaction
    ws.revert("f")
    monkeypatch.undo()
    outcome, reverted_first = race.join()
    a.close()
    b.close()
    if not reverted_first:  # the fsync went first
        assert outcome == "ok", outcome
        assert _names(ws) == ["d", "f"], "an fsync returned 0, then the revert removed the file"
        assert _content(ws, "f") == expected
        ws2 = env.crash_and_reopen(ws)
        assert _names(ws2) == ["d", "f"] and _content(ws2, "f") == expected
    else:  # the revert went first: the fsync is refused, the file is gone
        assert isinstance(outcome, NoSpace), outcome
        assert _names(ws) == ["d"]
        ws2 = env.crash_and_reopen(ws)
        assert _names(ws2) == ["d"]


def test_a_file_with_an_older_acknowledged_record_keeps_what_a_racing_fsync_acknowledged(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file has an acknowledged record: the revert decides to put it back to that
    record; another handle's fsync commits newer bytes in between and returns 0. Before
    the fix the revert put the memory back to the older record and deleted the chunks the
    newer record names."""
    ws = env.open()
    older = os.urandom(2 * CHUNK + 3)
    with ws.open("f", create=True) as fh:
        fh.write(0, older)
    a = ws.open("f")
    a.write(0, os.urandom(3 * CHUNK + 1))
    b = ws.open("f")
    expected = b.read(0, 4 * CHUNK)
    race = Race(b, b.fsync)
    race.hook(monkeypatch, ws.overlay, "trusted")  # the revert's decision on the record it read
    # before the fix it even removed the file: the fsync's commit forgot that the older,
    # unverified record was trusted, and the revert then judged that record untrusted
    assert ws.revert("f") is False, "a revert removed a file with acknowledged records"
    monkeypatch.undo()
    outcome, reverted_first = race.join()
    assert outcome == "ok", outcome  # after the revert it has nothing to commit
    kept = older if reverted_first else expected
    assert b.read(0, 4 * CHUNK) == kept
    a.close()
    b.close()
    assert _content(ws, "f") == kept
    ws2 = env.crash_and_reopen(ws)
    assert _content(ws2, "f") == kept


def test_a_new_file_whose_overlapped_first_fsync_is_finishing_is_not_removed_by_a_revert(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The untrusted path: a new file's first fsync committed its record unverified and is
    about to trust it and return 0, when a revert (a close of another handle refused for
    space) reads that record. Untrusted, so before the fix the revert removed the file
    right after that fsync returned 0."""
    ws = env.open()
    a = ws.open("f", create=True)
    data = os.urandom(2 * CHUNK + 9)
    a.write(0, data)
    outcome: list[object] = []

    def revert() -> None:
        try:
            outcome.append(ws.revert("f"))
        except NotFound as exc:
            outcome.append(exc)

    race = Race(a, revert)
    race.hook(monkeypatch, ws.overlay, "trust")  # the fsync's commit is durable, not yet trusted
    # the revert waits for the lock or, before the fix, for the overlapped commit to end
    original = ws.overlay.begin_namespace

    def begin_namespace():
        race.settled.set()
        return original()

    monkeypatch.setattr(ws.overlay, "begin_namespace", begin_namespace)
    a.fsync()  # returns 0: acknowledged
    assert race.join()[0] == "ok"
    monkeypatch.undo()
    assert outcome == [False], "the revert removed a file whose fsync had returned 0"
    a.close()
    assert _names(ws) == ["f"] and _content(ws, "f") == data
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == ["f"] and _content(ws2, "f") == data


def test_a_rename_over_the_path_between_the_decision_and_the_removal_removes_no_other_file(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revert judged ``f`` (unacked) removable; a rename of another, acknowledged file
    over ``f`` commits before the removal's transaction. Before the fix that transaction
    unlinked whatever ``f`` named then: the acknowledged file that replaced it."""
    ws = env.open()
    with ws.open("h", create=True) as fh:
        fh.write(0, b"acknowledged h")
    a = ws.open("f", create=True)
    a.write(0, os.urandom(CHUNK + 1))
    ws.mkdir("d")  # journals f, empty and unacknowledged
    race = Race(a, lambda: ws.rename("h", "f"))
    race.hook(monkeypatch, ws.overlay, "begin_namespace")  # the removal's transaction
    ws.revert("f")
    monkeypatch.undo()
    assert race.join() == ("ok", False)
    a.close()
    assert _names(ws) == ["d", "f"] and _content(ws, "f") == b"acknowledged h"
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == ["d", "f"] and _content(ws2, "f") == b"acknowledged h"
