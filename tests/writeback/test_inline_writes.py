"""``FileHandle.writes_in_memory``: the FUSE layer answers a WRITE on its request loop (no
worker-thread hop) only when this says the write just copies into a buffer, so it must
never say so for a write that loads, uploads or waits (docs/writeback.md, "Requests
answered without a thread hop")."""

from __future__ import annotations

import os

from tests.writeback.conftest import CHUNK, Env


def test_a_write_said_to_stay_in_memory_touches_no_shared_tier_object(env: Env) -> None:
    ws = env.open()
    before = set(env.shared_keys())
    data = os.urandom(CHUNK + 300)
    with ws.open("f", create=True, truncate=True) as fh:
        assert fh.writes_in_memory(0, 100)
        fh.write(0, data[:100])
        assert fh.writes_in_memory(CHUNK + 10, 290)  # a hole before it: zeros, still a buffer
        fh.write(CHUNK + 10, data[CHUNK + 10 : CHUNK + 300])
        assert set(env.shared_keys()) == before  # nothing uploaded yet
        assert not fh.writes_in_memory(CHUNK - 10, 20)  # spans two chunks
        assert not fh.writes_in_memory(0, 0)
        fh.write(100, data[100 : CHUNK + 10])
    with ws.open("f") as fh:
        assert fh.read(0, len(data)) == data


def test_a_write_filling_a_chunk_is_in_memory_only_with_an_upload_slot_free(env: Env) -> None:
    """It hands the full chunk to the upload pool (bigwrites20): no I/O and no wait on the
    request loop, unless every upload slot of the file is taken, where it would wait."""
    ws = env.open()
    data = os.urandom(2 * CHUNK)
    with ws.open("f", create=True, truncate=True) as fh:
        fh.write(0, data[:100])
        assert fh.writes_in_memory(100, CHUNK - 100)
        slots = ws.files.max_inflight
        ws.files.max_inflight = 0  # every slot taken: the upload it starts would wait for one
        try:
            assert not fh.writes_in_memory(100, CHUNK - 100)
            assert fh.writes_in_memory(100, CHUNK - 200)  # not filling it: still a copy
        finally:
            ws.files.max_inflight = slots
        fh.write(100, data[100:])
    with ws.open("f") as fh:
        assert fh.read(0, len(data)) == data


def test_a_partial_write_into_a_stored_chunk_is_not_in_memory_until_loaded(env: Env) -> None:
    ws = env.open()
    with ws.open("f", create=True, truncate=True) as fh:
        fh.write(0, b"a" * 1000)
    with ws.open("f") as fh:
        assert not fh.writes_in_memory(10, 10)  # the chunk must be read from the shared tier first
        fh.write(10, b"b" * 10)
        assert fh.writes_in_memory(30, 10)  # now buffered
        fh.write(30, b"c" * 10)
    with ws.open("f") as fh:
        assert fh.read(0, 2000) == b"a" * 10 + b"b" * 10 + b"a" * 10 + b"c" * 10 + b"a" * 960


def test_staged_files_and_closed_handles_are_never_in_memory(env: Env) -> None:
    ws = env.open()
    fh = ws.open("s", create=True, truncate=True, staged=True)
    assert fh.staged_fd >= 0 and not fh.writes_in_memory(0, 10)
    fh.close()
    plain = ws.open("p", create=True, truncate=True)
    plain.close()
    assert not plain.writes_in_memory(0, 10)


def test_committed_now_only_when_a_flush_would_have_nothing_to_commit(env: Env) -> None:
    ws = env.open()
    fh = ws.open("f", create=True, truncate=True)
    assert not fh.committed_now()  # created, not journaled: the first close writes it
    fh.write(0, b"x" * 100)
    assert not fh.committed_now()
    fh.fsync()
    assert fh.committed_now()  # a close after fsync: nothing left to commit
    fh.truncate(10)
    assert not fh.committed_now()  # size changed without a chunk change
    fh.close()
    assert not fh.committed_now()
    reader = ws.open("f")
    assert reader.committed_now()
    assert reader.read(0, 100) == b"x" * 10
    reader.close()
    staged = ws.open("s", create=True, truncate=True, staged=True)
    staged.fsync()
    assert not staged.committed_now()  # only an fstat of the staged file can tell
    staged.close()
    again = env.crash_and_reopen(ws)
    with again.open("f") as fh:
        assert fh.read(0, 100) == b"x" * 10


def test_releases_now_only_when_a_close_would_do_no_io(env: Env) -> None:
    ws = env.open()
    fh = ws.open("f", create=True, truncate=True)
    assert not fh.releases_now()  # created, not journaled: the close writes it
    fh.write(0, b"x" * 100)
    assert not fh.releases_now()
    fh.fsync()
    assert fh.releases_now()  # a release after the close's FLUSH committed: nothing to do
    fh.close()
    assert not fh.releases_now()  # closed
    reader = ws.open("f")
    assert reader.releases_now()
    ws.unlink("f")
    assert not reader.releases_now()  # the last close of an unlinked file deletes its record
    reader.close()
    staged = ws.open("s", create=True, truncate=True, staged=True)
    staged.fsync()
    assert not staged.releases_now()  # only an fstat of the staged file can tell
    staged.close()
    again = env.crash_and_reopen(ws)
    assert again.listdir("") == [("s", again.stat("s"))]


def test_creates_in_memory_only_when_a_create_would_neither_commit_nor_wait(env: Env) -> None:
    ws = env.open()
    assert not ws.creates_in_memory("a")  # no file id in hand: the first create reserves a block
    ws.open("a", create=True, truncate=True).close()
    assert ws.creates_in_memory("b")
    pending = ws.open("b", create=True, truncate=True)  # in the overlay, not journaled
    assert not ws.creates_in_memory("b") and not ws.creates_in_memory("a")  # both exist
    assert not ws.creates_in_memory("../x") and not ws.creates_in_memory("")
    ws.overlay.begin_namespace()  # a namespace transaction running: a creator would wait
    try:
        assert not ws.creates_in_memory("c")
    finally:
        ws.overlay.end_namespace()
    assert ws.creates_in_memory("c")
    pending.close()
    again = env.crash_and_reopen(ws)
    assert [name for name, _ in again.listdir("")] == ["a", "b"]
