"""wbreview24: two writes into one stored chunk of an open file at once keep both.

Found through a real mount with ``--writeback-cache`` (tests/fuse/test_wbreview24.py: two
descriptors of one file written in turn, then read back after both closed): the kernel
sends a file's dirty pages in WRITEs that the daemon runs side by side, and a write
whose chunk is only in the shared tier loads it with the file's lock released
(``OpenFile._buffer``). Another write into that chunk meanwhile loaded it too, wrote its
bytes and, the chunk now full, handed its buffer to a write-behind upload
(``_start_upload``: the buffer leaves ``buffers`` for ``inflight``). The first write, back
under the lock, found no buffer and built one from the bytes it had loaded, the chunk as
stored before the other write: the other write's bytes were gone from the file, its upload
discarded as written again, and every close returned 0. Here the two writes are run in
that order by holding the first one's load and the second one's upload.
"""

from __future__ import annotations

import threading

import pytest

from datahub.errors import StorageError
from tests.writeback.conftest import CHUNK, Env


def test_a_write_loading_a_chunk_keeps_a_write_that_filled_it_meanwhile(env: Env) -> None:
    ws = env.open()
    with ws.open("f", create=True, truncate=True) as fh:
        fh.write(0, b"o" * (2 * CHUNK))
    h1, h2 = ws.open("f"), ws.open("f")
    store = ws.chunks
    get, put = store.get, store.put
    loading, may_load = threading.Event(), threading.Event()
    uploading, may_upload = threading.Event(), threading.Event()
    first_get = threading.Lock()

    def held_get(key: str, length: int, path: str) -> bytes:
        data = get(key, length, path)
        if threading.current_thread().name == "first" and first_get.acquire(blocking=False):
            loading.set()  # the first write has the chunk's old bytes, outside the file's lock
            assert may_load.wait(30)
        return data

    def held_put(file_id: int, index: int, data: bytes | bytearray, path: str) -> str:
        uploading.set()  # the second write's write-behind upload of the filled chunk
        assert may_upload.wait(30)
        return put(file_id, index, data, path)

    store.get, store.put = held_get, held_put  # type: ignore[method-assign]
    errors: list[BaseException] = []

    def first() -> None:
        try:
            h1.write(100, b"A" * 10)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    thread = threading.Thread(target=first, name="first")
    thread.start()
    try:
        assert loading.wait(30)
        h2.write(0, b"B" * 50)  # loads chunk 0 too, fills it: its upload starts (and is held)
        assert uploading.wait(30)
    finally:
        may_load.set()
        thread.join(30)
        may_upload.set()
    store.get, store.put = get, put  # type: ignore[method-assign]
    assert not errors and not thread.is_alive()
    expected = b"B" * 50 + b"o" * 50 + b"A" * 10 + b"o" * (2 * CHUNK - 110)
    assert h1.read(0, 2 * CHUNK) == expected  # before the fix: the B's read back as o's
    h1.close()
    h2.close()
    with ws.open("f") as fh:
        assert fh.read(0, 3 * CHUNK) == expected
    ws.close()
    ws = env.open()  # what the journal acknowledged
    with ws.open("f") as fh:
        assert fh.read(0, 3 * CHUNK) == expected


@pytest.mark.parametrize("crash", [False, True], ids=["lost-reply", "lost-reply-then-kill"])
def test_an_object_put_whose_reply_was_lost_is_deleted_with_its_file(env: Env, crash: bool) -> None:
    """A flush's PUT landed in the origin, but the flush never learned it (the reply lost and
    every retry failed, or the process killed before it recorded the upload): the journal had
    no origin entry for that path, so when the file went (unlink, rename away) no flush ever
    deleted the object, and the flush target held a file the workspace no longer had, for
    good. Found by tests/fuse/test_wbreview24.py with a slow origin and kill -9: removed files
    were left in the bucket after ``datahub umount``."""
    ws = env.open()
    with ws.open("gone", create=True, truncate=True) as fh:
        fh.write(0, b"g" * (CHUNK + 1))
    with ws.open("moved", create=True, truncate=True) as fh:
        fh.write(0, b"m" * 10)
    origin = ws.flusher.origin
    put = origin.put

    def lost_reply(key: str, data, **kwargs):
        put(key, data, **kwargs)
        raise StorageError(f"injected: the reply to the PUT of {key!r} was lost")

    origin.put = lost_reply  # type: ignore[method-assign]
    try:
        with pytest.raises(StorageError):
            ws.flush()
    finally:
        del origin.put  # the store's own method again
    assert sorted(_origin_files(ws)) == ["gone", "moved"]  # both landed
    if crash:
        ws = env.crash_and_reopen(ws)
    ws.unlink("gone")
    ws.rename("moved", "there")
    ws.flush()
    assert sorted(_origin_files(ws)) == ["there"]  # before the fix: gone, moved and there
    assert ws.dirty() == []


def _origin_files(ws) -> list[str]:
    return [o.key for o in ws.flusher.origin.list()]


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_evicted_file_opened_while_a_flush_moves_its_origin_copy_reads_its_bytes(
    env: Env, when: str
) -> None:
    """An evicted file renamed since its eviction lives only in its old origin object, until
    a flush uploads it under its new name, points its ``src`` there and deletes the old one.
    An open that reloaded it meanwhile (``Flusher.rehydrate``, reading the old ``src``) failed:
    with the flush's move *before* it read the old object, the read found it deleted and the
    open failed with NotFound (ENOENT through a mount, for a file ``ls`` shows); *after*, its
    journal write found the record's ``src`` changed and reloaded again inside that write,
    which LMDB refuses (a nested write transaction): StorageError, EIO. Found by
    tests/fuse/test_wbreview24.py with a small shared tier (evictions all the time)."""
    data = bytes(range(256)) * (2 * CHUNK // 256) + b"tail"
    ws = env.open()
    with ws.open("a", create=True, truncate=True) as fh:
        fh.write(0, data)
    ws.flush()
    assert ws.flusher.evict(0) > 0
    assert ws.journal_record("a").get("src")
    ws.rename("a", "b")
    origin = ws.flusher.origin
    read = origin.read
    moved = threading.Event()
    reads = []  # the reload's reads: one per chunk, three chunks

    def moving_read(*args, **kwargs):
        if moved.is_set() or threading.current_thread().name.startswith("flush-"):
            return read(*args, **kwargs)
        reads.append(args)
        if when == "before":
            moved.set()
            ws.flush()  # b uploaded from a's object, its src moved to b, a deleted
            return read(*args, **kwargs)
        out = read(*args, **kwargs)
        if len(reads) == 3:  # the reload read it all, and writes its record next
            moved.set()
            ws.flush()
        return out

    origin.read = moving_read  # type: ignore[method-assign]
    try:
        with ws.open("b") as fh:
            assert fh.read(0, len(data) + 1) == data
    finally:
        del origin.read
    assert moved.is_set()
    assert sorted(_origin_files(ws)) == ["b"]


def test_a_read_whose_chunk_a_commit_replaced_meanwhile_reads_the_file(env: Env) -> None:
    """A read takes a chunk's key under the file's lock and reads it outside: a chunk that a
    write-behind upload staged, replaced by a newer upload and deleted by the next fsync
    (``OpenFile.discard``) meanwhile is gone when the read gets to it."""
    ws = env.open()
    with ws.open("f", create=True, truncate=True) as fh:
        fh.write(0, b"a" * (2 * CHUNK))
    writer, reader = ws.open("f"), ws.open("f")
    writer.write(0, b"b" * CHUNK)  # chunk 0 full: its write-behind upload stages a key
    writer._of._wait_uploads()
    assert 0 in writer._of.staged and 0 not in writer._of.buffers
    store = ws.chunks
    get = store.get
    reading, may_read = threading.Event(), threading.Event()

    def held_get(key: str, length: int, path: str) -> bytes:
        if threading.current_thread().name == "reader" and not reading.is_set():
            reading.set()
            assert may_read.wait(30)
        return get(key, length, path)

    store.get = held_get  # type: ignore[method-assign]
    got: list[bytes | BaseException] = []

    def read() -> None:
        try:
            got.append(reader.read(0, CHUNK))
        except BaseException as exc:  # reported by the test's thread
            got.append(exc)

    thread = threading.Thread(target=read, name="reader")
    thread.start()
    try:
        assert reading.wait(30)
        writer.write(0, b"c" * CHUNK)  # a newer upload of chunk 0 replaces the staged key
        writer.fsync()  # commits it and deletes the one the reader holds
    finally:
        may_read.set()
        thread.join(30)
        del store.get
    assert got and got[0] in (b"b" * CHUNK, b"c" * CHUNK), got
    writer.close()
    reader.close()
