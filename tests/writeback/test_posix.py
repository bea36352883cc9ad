"""POSIX-like semantics the FUSE layer relies on, checked against the workspace API directly."""

from __future__ import annotations

import os
import threading

import pytest

from datahub.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    InvalidKey,
    IsADirectory,
    NoSpace,
    NotADirectory,
    NotEmpty,
    NotFound,
)
from tests.writeback.conftest import CHUNK, Env


def read_all(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size + 10)


def test_write_read_back_unflushed_across_chunks(env: Env) -> None:
    ws = env.open()
    data = os.urandom(3 * CHUNK + 123)
    with ws.open("f.bin", create=True) as fh:
        assert fh.write(0, data) == len(data)
        assert fh.read(CHUNK - 10, 20) == data[CHUNK - 10 : CHUNK + 10]  # before any fsync
    assert ws.stat("f.bin").size == len(data)
    assert read_all(ws, "f.bin") == data
    assert ws.dirty() == ["f.bin"]


def test_random_writes_match_a_bytearray(env: Env) -> None:
    import random

    rng = random.Random(7)
    ws = env.open()
    model = bytearray()
    with ws.open("r.bin", create=True) as fh:
        for step in range(60):
            offset = rng.randrange(0, 5 * CHUNK)
            chunk = rng.randbytes(rng.randrange(1, 2 * CHUNK))
            fh.write(offset, chunk)
            if offset > len(model):
                model.extend(bytes(offset - len(model)))
            model[offset : offset + len(chunk)] = chunk
            if step % 7 == 0:
                fh.fsync()
        assert fh.read(0, len(model) + 5) == bytes(model)
    assert read_all(ws, "r.bin") == bytes(model)
    ws2 = env.crash_and_reopen(ws)
    assert read_all(ws2, "r.bin") == bytes(model)


def test_sparse_extension_reads_zeros(env: Env) -> None:
    ws = env.open()
    with ws.open("s", create=True) as fh:
        fh.write(0, b"abc")
        fh.write(2 * CHUNK + 5, b"xyz")
    data = read_all(ws, "s")
    assert data == b"abc" + bytes(2 * CHUNK + 2) + b"xyz"


def test_truncate_shrink_then_grow_reads_zeros(env: Env) -> None:
    ws = env.open()
    payload = os.urandom(2 * CHUNK + 100)
    with ws.open("t", create=True) as fh:
        fh.write(0, payload)
    ws.truncate("t", CHUNK + 7)
    assert read_all(ws, "t") == payload[: CHUNK + 7]
    ws.truncate("t", 3 * CHUNK)
    assert read_all(ws, "t") == payload[: CHUNK + 7] + bytes(2 * CHUNK - 7)
    with ws.open("t", truncate=True) as fh:
        assert fh.read(0, 10) == b""
    assert ws.stat("t").size == 0
    ws2 = env.crash_and_reopen(ws)
    assert ws2.stat("t").size == 0


def test_two_handles_share_unflushed_writes(env: Env) -> None:
    ws = env.open()
    a = ws.open("shared", create=True)
    b = ws.open("shared")
    a.write(0, b"hello")
    assert b.read(0, 5) == b"hello"
    b.write(5, b" world")
    assert a.read(0, 11) == b"hello world"
    a.close()
    b.close()
    assert read_all(ws, "shared") == b"hello world"


def test_rename_files_and_directories(env: Env) -> None:
    ws = env.open()
    ws.mkdir("a")
    ws.mkdir("a/b")
    for path in ("a/1", "a/b/2"):
        with ws.open(path, create=True) as fh:
            fh.write(0, path.encode())
    ws.rename("a", "z")
    assert [n for n, _ in ws.listdir("z")] == ["1", "b"]
    assert read_all(ws, "z/b/2") == b"a/b/2"
    with pytest.raises(NotFound):
        ws.stat("a")
    ws.rename("z/1", "z/b/one")
    assert read_all(ws, "z/b/one") == b"a/1"
    with pytest.raises(InvalidInput):
        ws.rename("z", "z/b/inside")
    # replacing a file by rename drops the old one
    with ws.open("other", create=True) as fh:
        fh.write(0, b"other")
    ws.rename("other", "z/b/one")
    assert read_all(ws, "z/b/one") == b"other"
    ws2 = env.crash_and_reopen(ws)
    assert sorted(n for n, _ in ws2.listdir("z/b")) == ["2", "one"]


def test_unlink_open_file_stays_readable_until_close(env: Env) -> None:
    ws = env.open()
    with ws.open("gone", create=True) as fh:
        fh.write(0, b"still here" * 1000)
    fh = ws.open("gone")
    ws.unlink("gone")
    with pytest.raises(NotFound):
        ws.stat("gone")
    assert fh.read(0, 10) == b"still here"
    fh.write(0, b"STILL")
    fh.fsync()
    assert fh.read(0, 10) == b"STILL here"
    fh.close()
    ws.flusher.gc()
    assert ws.listdir("") == []
    assert env.shared_keys() == []  # its chunks were collected


def test_mkdir_rmdir_and_error_types(env: Env) -> None:
    ws = env.open()
    ws.mkdir("d")
    with pytest.raises(AlreadyExists):
        ws.mkdir("d")
    with ws.open("d/f", create=True):
        pass
    with pytest.raises(NotEmpty) as exc:
        ws.rmdir("d")
    assert exc.value.errno == 39  # ENOTEMPTY
    with pytest.raises(NotADirectory):
        ws.rmdir("d/f")
    with pytest.raises(NotADirectory):
        ws.open("d/f/x", create=True)
    with pytest.raises(IsADirectory):
        ws.open("d")
    with pytest.raises(IsADirectory):
        ws.unlink("d")
    with pytest.raises(NotFound):
        ws.open("missing/f", create=True)
    with pytest.raises(NotFound):
        ws.open("nope")
    with pytest.raises(InvalidKey):
        ws.open("../escape", create=True)
    ws.unlink("d/f")
    ws.rmdir("d")
    assert ws.listdir("/") == []


def test_second_writer_gets_conflict_naming_the_pid(env: Env) -> None:
    env.open()
    with pytest.raises(Conflict) as exc:
        env.open()
    assert str(os.getpid()) in exc.value.message


def test_concurrent_writers_on_many_files(env: Env) -> None:
    ws = env.open()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(10):
                with ws.open(f"t{n}-{i}", create=True) as fh:
                    fh.write(0, bytes([n]) * (CHUNK + i))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(ws.listdir("")) == 60
    assert read_all(ws, "t3-4") == bytes([3]) * (CHUNK + 4)


def test_unacknowledged_writes_are_not_kept_and_acknowledged_ones_are(env: Env) -> None:
    ws = env.open()
    with ws.open("acked", create=True) as fh:
        fh.write(0, b"A" * 5000)
    fh = ws.open("acked")
    fh.write(0, b"B" * 5000)  # never fsynced
    ws2 = env.crash_and_reopen(ws)
    assert read_all(ws2, "acked") == b"A" * 5000


def test_revert_puts_a_file_back_to_its_last_acknowledged_state(env: Env) -> None:
    """``Workspace.revert`` (docs/writeback.md, "Out of space at close"): every change since
    the last fsync/close goes, chunks already uploaded by write-behind included, and nothing
    of it is committed later; a file with no acknowledged state is unlinked."""
    ws = env.open()
    acked = os.urandom(3 * CHUNK + 100)
    fh = ws.open("f", create=True)
    fh.write(0, acked)
    fh.fsync()
    record = ws.journal_record("f")
    fh.truncate(CHUNK)
    fh.write(CHUNK, os.urandom(40 * CHUNK))  # past the buffer budget: write-behind uploads
    other = ws.open("f")  # a second handle shares the open file, and its changes
    other.write(0, b"x" * 10)
    assert ws.revert("f") is False
    assert ws.stat("f").size == len(acked) and other.read(0, len(acked) + 10) == acked
    fh.close()
    other.close()  # nothing left to commit: the record is the acknowledged one
    assert ws.journal_record("f") == record
    new = ws.open("new", create=True)
    new.write(0, b"never acknowledged")
    assert ws.revert("new") is True
    new.close()
    assert [name for name, _ in ws.listdir("")] == ["f"]
    ws2 = env.crash_and_reopen(ws)
    assert read_all(ws2, "f") == acked and [name for name, _ in ws2.listdir("")] == ["f"]


def test_a_reverted_new_file_is_dropped_and_its_handles_commit_nothing(env: Env) -> None:
    """``Workspace.revert`` of a created file not yet journaled drops it from the overlay
    (docs/writeback.md, "Out of space at close"): every handle of it then fails its writes,
    truncates and fsyncs with NoSpace, its close releases it and commits nothing, and the
    path is free for a new file."""
    ws = env.open()
    fh = ws.open("new", create=True)
    fh.write(0, os.urandom(3 * CHUNK))
    other = ws.open("new")
    assert ws.revert("new") is True
    assert ws.listdir("") == []
    for call in (lambda: other.write(0, b"x"), lambda: other.truncate(0), other.fsync, fh.fsync):
        with pytest.raises(NoSpace):
            call()
    again = ws.open("new", create=True)  # a new file at the path, nothing of the dropped one
    assert again.read(0, 10) == b""
    again.write(0, b"second")
    again.close()
    fh.close()
    other.close()
    ws.mkdir("d")  # a namespace transaction journals every pending file: not the dropped one
    assert [name for name, _ in ws.listdir("")] == ["d", "new"]
    ws2 = env.crash_and_reopen(ws)
    assert read_all(ws2, "new") == b"second"
