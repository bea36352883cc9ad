"""What smallwrites18 cut from a small file's way through a workspace mount, and what must
still hold (issue 41; docs/writeback.md, "A small file's CPU in the daemon"):

- the hop to a thread (``fuse_adapter/hop.py``, ``WorkspaceOps._thread``), which replaced
  ``trio.to_thread.run_sync`` for the mount's blocking requests (every small file's FLUSH):
  what trio's hop guaranteed must still hold;
- the journal's decoded namespace entries, kept by their bytes (``journal._entry_of``): each
  read gets its own dict, and a changed entry is read as changed;
- a CREATE's attributes from the new handle (``FileHandle.attr``), not a second ``stat``:
  they must be what ``stat`` says.

No mount: these are the units; the mounts' own tests (``test_workspace*.py``,
``tests/writeback``) run every request through them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from datahub.writeback.journal import Journal
from fuse_adapter.fuse_ops import WorkspaceOps
from fuse_adapter.hop import Hop
from tests.writeback.conftest import make_env


def _ops(threads: int) -> SimpleNamespace:
    return SimpleNamespace(_hop=Hop(threads, "test-hop"))


def test_a_call_runs_in_a_hop_thread_and_its_result_or_error_comes_back():
    ops = _ops(2)

    def where(x: int) -> tuple[str, int]:
        return threading.current_thread().name, x + 1

    def fails() -> None:
        raise KeyError("gone")

    async def main() -> None:
        name, value = await WorkspaceOps._thread(ops, where, 41)
        assert name.startswith("test-hop-") and value == 42
        assert name != threading.current_thread().name
        with pytest.raises(KeyError, match="gone"):
            await WorkspaceOps._thread(ops, fails)
        assert await WorkspaceOps._thread(ops, lambda *, k: k, k="kw") == "kw"

    trio.run(main)


def test_at_most_threads_calls_run_at_once_and_the_rest_wait_their_turn():
    ops = _ops(2)
    running, peak, order = [0], [0], []
    gate = threading.Event()
    lock = threading.Lock()

    def call(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            order.append(i)
        gate.wait(10)
        with lock:
            running[0] -= 1
        return i

    async def main() -> None:
        results = {}

        async def one(i: int) -> None:
            results[i] = await WorkspaceOps._thread(ops, call, i)

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, i)
                await trio.sleep(0)  # submitted in this order
            with trio.fail_after(10):
                while len(order) < 2:
                    await trio.sleep(0.001)
            assert peak[0] == 2 and ops._hop.threads == 2  # the other four wait, no third thread
            gate.set()
        assert results == {i: i for i in range(6)}
        assert sorted(order[:2]) == [0, 1] and order[2:] == [2, 3, 4, 5]

    trio.run(main)
    assert peak[0] == 2


def test_a_started_call_is_never_abandoned_by_a_cancelled_caller():
    """A journal write must finish: the caller's task waits for it even when cancelled (at
    unmount the session's tasks are cancelled), as trio's ``abandon_on_cancel=False`` did."""
    ops = _ops(1)
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def commit() -> str:
        started.set()
        release.wait(10)
        finished.set()
        return "durable"

    async def main() -> None:
        got, scope = [], trio.CancelScope()

        async def caller() -> None:
            with scope:
                got.append(await WorkspaceOps._thread(ops, commit))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            await trio.to_thread.run_sync(started.wait, 10)
            scope.cancel()
            await trio.sleep(0.05)
            assert not finished.is_set() and got == []  # still waiting, not abandoned
            release.set()
        assert finished.is_set() and got == ["durable"]

    trio.run(main)


def test_a_caller_cancelled_before_its_call_starts_nothing():
    ops = _ops(1)
    ran = []

    async def main() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            await WorkspaceOps._thread(ops, ran.append, 1)
        assert scope.cancelled_caught

    trio.run(main)
    assert ran == [] and ops._hop.threads == 0


def test_a_namespace_entry_read_twice_is_two_dicts_and_a_changed_one_reads_changed(tmp_path: Path):
    journal = Journal(tmp_path / "lmdb", "workspace 'entries'")
    try:
        with journal.write("mkdir of 'd'") as txn:
            txn.put_entry("d", {"t": "d", "mtime": 1.5, "mode": 0o755})
        with journal.read() as txn:
            first = txn.entry("d")
            first["mode"] = 0  # a caller's change to its copy
            first["extra"] = True
            assert txn.entry("d") == {"t": "d", "mtime": 1.5, "mode": 0o755}
        with journal.write("utime of 'd'") as txn:
            txn.put_entry("d", {"t": "d", "mtime": 2.5, "mode": 0o700})
        with journal.read() as txn:
            assert txn.entry("d") == {"t": "d", "mtime": 2.5, "mode": 0o700}
            assert txn.entry("missing") is None
    finally:
        journal.close()


def test_a_created_file_s_handle_attributes_are_what_stat_says(tmp_path: Path):
    env = make_env(tmp_path)
    try:
        ws = env.open()
        ws.mkdir("d")
        handle = ws.open("d/new", create=True, truncate=True)
        assert handle.attr() == ws.stat("d/new")
        handle.write(0, b"x" * 5000)
        assert handle.attr() == ws.stat("d/new") and handle.attr().size == 5000
        handle.close()
        again = ws.open("d/new")
        assert again.attr() == ws.stat("d/new")
        again.close()
    finally:
        env.close()
