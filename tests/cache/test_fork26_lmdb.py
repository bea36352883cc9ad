"""fork26: LMDB handles a forked child inherits (the disk cache index; see datahub.lmdb_fork).

A child (a DataLoader worker) opening the disk cache index closes its inherited copy of the
parent's handle first (py-lmdb opens an environment's files once per process). Closing it
aborted every transaction the child inherited with it: a parent thread's write transaction in
flight at the fork made the child's close wait for ever, and a parent thread's read snapshot
lost its slot in the reader table both processes share, so the parent's next writes reused
its pages under it. A fork now waits for the other threads' transactions to end (holding new
ones back); one still open when the wait ends keeps the parent's handle open in the child.
"""

from __future__ import annotations

import os
import sys
import threading

from datahub.cache.index import open_index
from datahub.cache.pages import PageKey
from datahub.errors import StorageError
from tests.cache.test_fork25 import in_child

_armed: list[threading.Event] = []


def _release_at_fork() -> None:
    """The test's own before-fork hook (runs before datahub's): lets the held thread go on."""
    for event in _armed:
        event.set()


os.register_at_fork(before=_release_at_fork)


def keys(n: int, tag: str) -> list[tuple[PageKey, int]]:
    return [(PageKey(f"s3://b/{tag}{i}", "etag", 1024, i), 100 + i) for i in range(n)]


def test_a_child_forked_while_a_parent_thread_writes_the_index_opens_its_own(tmp_path) -> None:
    """A parent thread is inside a write transaction of the index when the fork starts: the
    fork waits for it to commit, and the child opens, writes and closes its own handle."""
    index = open_index(tmp_path / "index")
    index.attach()
    inside, release = threading.Event(), threading.Event()
    mine = keys(3, "parent")

    def entries():
        yield mine[0]
        inside.set()
        assert release.wait(60), "never released"
        yield from mine[1:]

    writer = threading.Thread(target=index.add_many, args=(entries(),))
    writer.start()
    try:
        assert inside.wait(60)
        _armed.append(release)

        def child() -> bool:
            own = open_index(tmp_path / "index")
            own.attach()
            own.add_many(keys(2, "child"))
            seen = {k.url for k, _ in own.entries()}
            own.close()
            return seen >= {k.url for k, _ in mine + keys(2, "child")}

        outcome = in_child(child, timeout=30)
    finally:
        _armed.clear()
        release.set()
        writer.join(60)
    assert outcome == 0, f"child: {outcome} (on main it waited for the parent's write transaction for ever)"
    assert {k.url for k, _ in index.entries()} == {k.url for k, _ in mine + keys(2, "child")}
    index.close()


def test_a_parent_snapshot_open_across_the_fork_is_never_released_by_the_child(tmp_path, monkeypatch) -> None:
    """A parent thread is part-way through reading the index (one read transaction) and stays
    there past the fork's wait: the child refuses to open the index (it cannot close the
    parent's handle without ending that transaction), and the parent's snapshot stays whole
    while the parent rewrites the index. On main the child closed it: the snapshot's pages
    were reused and the rest of the read returned other entries."""
    import datahub.cache.index as index_module

    fork_gate = sys.modules.get("datahub.lmdb_fork")  # what the index imports (none on main)
    if fork_gate is not None:
        monkeypatch.setattr(fork_gate, "FORK_WAIT", 0.2)  # the reader below outlives the wait
    assert index_module.open_index is open_index
    index = open_index(tmp_path / "index")
    index.attach()
    before = keys(20, "old")
    index.add_many(before)
    paused, go_on = threading.Event(), threading.Event()
    read: list[str] = []
    failed: list[BaseException] = []

    def reader() -> None:
        try:
            for n, (key, _) in enumerate(index.entries()):
                read.append(key.url)
                if n == 0:
                    paused.set()
                    assert go_on.wait(60), "never resumed"
        except BaseException as exc:  # reported by the test
            failed.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        assert paused.wait(60)

        def child() -> bool:
            try:
                open_index(tmp_path / "index")
            except StorageError as exc:
                return "had a transaction of it open at the fork" in str(exc)
            return True  # main: it closed the parent's handle and opened its own

        outcome = in_child(child, timeout=30)
        for round_ in range(4):  # rewrite every entry: pages no live snapshot holds are reused
            index.replace_all(keys(20, f"new{round_}"))
    finally:
        go_on.set()
        thread.join(60)
    assert outcome == 0, f"child: {outcome}"
    assert not failed, f"the parent's read failed: {failed!r}"
    assert sorted(read) == sorted(k.url for k, _ in before), (
        "the parent's snapshot read entries written after it began: the child released its reader slot"
    )
    index.close()


def test_a_child_forked_while_a_parent_thread_commits_to_a_journal_closes_its_copy(tmp_path) -> None:
    """The write-back journal: a parent thread is inside a write transaction at the fork; the
    child closes the journal it inherited (as a worker dropping a workspace does). On main its
    close waited for that transaction for ever."""
    from datahub.writeback.journal import Journal

    journal = Journal(tmp_path / "lmdb", "workspace 'w'")
    inside, release = threading.Event(), threading.Event()

    def commit() -> None:
        with journal.write("a put") as txn:
            txn.put_meta("k", "parent")
            inside.set()
            assert release.wait(60), "never released"

    writer = threading.Thread(target=commit)
    writer.start()
    try:
        assert inside.wait(60)
        _armed.append(release)

        def child() -> bool:
            journal.close()
            return True

        outcome = in_child(child, timeout=30)
    finally:
        _armed.clear()
        release.set()
        writer.join(60)
    try:
        assert outcome == 0, f"child: {outcome} (on main its close waited for the parent's transaction)"
        with journal.read() as txn:
            assert txn.meta("k") == "parent"
        with journal.write("another put") as txn:
            txn.put_meta("k2", "still")
    finally:
        journal.close()
