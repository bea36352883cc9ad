"""review18d: attacks on smallwrites18's hop (``fuse_adapter/hop.py``, ``WorkspaceOps._thread``).

Held: a call queued behind a stuck one (every slot taken) whose caller is cancelled, as the
session's tasks are at unmount, is not dropped half-way: it runs once a slot frees and its
caller waits for it and gets its result, so a FLUSH is answered only after its commit ran;
a call that raises does not cost its thread (the next call runs in the same one).

Found and fixed (``fuse_adapter/hop.py``): a thread that could not start failed its caller
while its call stayed queued and ran later, and the unstarted thread kept its slot.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from fuse_adapter.fuse_ops import WorkspaceOps
from fuse_adapter.hop import Hop, Job


def test_a_cancelled_caller_queued_behind_a_stuck_call_waits_for_its_call() -> None:
    ops = SimpleNamespace(_hop=Hop(1, "review18d"))
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def stuck() -> str:
        started.set()
        release.wait(10)
        return "stuck"

    def commit() -> str:
        ran.append("commit")
        return "durable"

    async def main() -> None:
        got: list[str] = []
        scope = trio.CancelScope()

        async def queued() -> None:
            with scope:
                got.append(await WorkspaceOps._thread(ops, commit))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(WorkspaceOps._thread, ops, stuck)
            await trio.to_thread.run_sync(started.wait, 10)
            nursery.start_soon(queued)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert ran == [] and got == []  # queued behind the stuck call, still waited for
            release.set()
        assert ran == ["commit"] and got == ["durable"]

    trio.run(main)
    assert ops._hop.threads == 1


def test_a_call_that_raises_keeps_its_thread() -> None:
    ops = SimpleNamespace(_hop=Hop(1, "review18d"))

    def fails() -> None:
        raise KeyboardInterrupt  # even a BaseException is delivered to its caller

    async def main() -> None:
        with pytest.raises(KeyboardInterrupt):
            await WorkspaceOps._thread(ops, fails)
        assert await WorkspaceOps._thread(ops, threading.current_thread) is not threading.current_thread()

    trio.run(main)
    assert ops._hop.threads == 1


def test_a_thread_that_cannot_start_fails_its_call_and_runs_nothing_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pids limit (a pod's cgroup) refuses a new thread: trio's hop raised that into the
    caller (the request answered EIO) and ran nothing. The own hop queued the call first: its
    caller got the error, and the call still ran later in another thread (a WRITE answered
    EIO landing after the writer had moved on), and the thread that never started kept its
    slot for good."""
    hop = Hop(2, "review18d")
    start = threading.Thread.start

    def pids_limit(thread: threading.Thread) -> None:
        if thread.name == "review18d-2":
            raise RuntimeError("can't start new thread")  # what CPython raises on EAGAIN
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", pids_limit)
    ran: list[str] = []
    release, first_done, last_done = threading.Event(), threading.Event(), threading.Event()
    hop.submit(Job(lambda: (release.wait(10), ran.append("first")), (), {}, first_done.set))
    with pytest.raises(RuntimeError, match="can't start new thread"):
        hop.submit(Job(ran.append, ("answered EIO",), {}, lambda: None))
    assert hop.threads == 1  # the refused thread holds no slot
    release.set()
    assert first_done.wait(10)
    hop.submit(Job(ran.append, ("last",), {}, last_done.set))
    assert last_done.wait(10)
    assert ran == ["first", "last"]
