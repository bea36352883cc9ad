"""A new file's first close: chunk uploads and journal commit run at the same time.

The record is committed *unverified* (it names chunks that may not be durable yet); the
close returns once both steps are durable. These tests drive every way that can go wrong
in one process, deterministically (failing or blocking hooks, chunks damaged by hand while
the workspace is down); test_crash.py kills a real process between the two steps.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from datahub.errors import NotFound, StorageError
from tests.writeback.conftest import CHUNK, Env, objects_of


def damage(env: Env, ws, key: str, length: int, how: str) -> None:
    """Damage chunk ``key`` (a chunk file, or its range of a pack) the way a crash can."""
    obj, start = ws.chunks.locate(key)
    target = Path(env.config.resolved_shared_url.removeprefix("file://")) / obj
    if how == "missing":  # never written: no file, or a pack that ends before it
        if start == 0:
            target.unlink()
        else:
            os.truncate(target, start)
    elif how == "torn":
        os.truncate(target, start + length // 2)
    elif how == "garbage":  # right length, wrong bytes: only the CRC tells
        with open(target, "r+b") as fh:
            fh.seek(start)
            fh.write(bytes(length))


def wait_for(condition, what: str) -> None:
    """Readiness wait (never a correctness condition): poll until ``condition()`` holds."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.001)


def test_first_close_is_unverified_until_flushed_and_trusted_meanwhile(env: Env) -> None:
    ws = env.open()
    with ws.open("a", create=True) as fh:
        fh.write(0, b"x" * 100)
    rec = ws.journal_record("a")
    assert list(rec["unverified"]) == [k for k, _ in rec["chunks"].values()]  # cleared lazily
    with ws.journal.read() as txn:
        file_id = txn.entry("a")["id"]
    assert ws.trusted(file_id, rec)  # seen durable by this process: the flusher may upload it
    assert not ws.trusted(file_id, {**rec, "gen": rec["gen"] + 1})
    with ws.open("a") as fh:  # an overwrite goes the sequential way and needs no flag
        fh.write(0, b"y")
    assert "unverified" not in ws.journal_record("a")
    with ws.open("b", create=True) as fh:
        fh.write(0, b"b" * (2 * CHUNK + 5))  # two chunks by write-behind, the last one overlapped
    assert len(ws.journal_record("b")["unverified"]) == 1
    assert ws.flush().uploaded == 2 and ws.dirty() == []
    assert "unverified" not in ws.journal_record("b")  # the flush's transaction cleared it
    assert env.origin().read("b") == b"b" * (2 * CHUNK + 5)


@pytest.mark.parametrize("how", ["none", "missing", "torn", "garbage"])
def test_recovery_checks_every_unverified_chunk(env: Env, how: str) -> None:
    ws = env.open()
    with ws.open("old", create=True) as fh:
        fh.write(0, b"o" * 50)
    ws.flush()  # "old" is verified now
    data = bytes(range(256)) * ((2 * CHUNK + 700) // 256)
    with ws.open("d", create=True) as fh:
        fh.write(0, data)
    rec = ws.journal_record("d")
    (key, (length, _fp)), *_ = rec["unverified"].items()
    ws.abandon()  # the flag is still set: a crash now
    if how != "none":
        damage(env, ws, key, length, how)
    ws = env.open()
    if how == "none":
        with ws.open("d") as fh:
            assert fh.read(0, len(data) + 1) == data
        assert "unverified" not in ws.journal_record("d")
        expected = {"old", "d"}
    else:
        with pytest.raises(NotFound):
            ws.stat("d")
        expected = {"old"}
    assert {name for name, _ in ws.listdir()} == expected
    with ws.journal.read() as txn:
        referenced = {k for _, r in txn.files() for k, _ in r["chunks"].values()}
    assert set(env.shared_keys()) == objects_of(ws, referenced)  # the dropped file's chunks are gone too
    ws.flush()
    assert set(env.origin_files()) == expected


def failing_writes(ws, count: int = 1) -> list[str]:
    """The next ``count`` overlapped chunk writes fail (nothing stored); returns their keys."""
    real, failed = ws.chunks.write, []

    def write(key, data, path, trailer=b""):
        if len(failed) < count:
            failed.append(key)
            ws.chunks.abandon([key])  # as a failed write gives its key up (its pack's reservation)
            raise StorageError(f"injected failure storing {key}")
        return real(key, data, path, trailer)

    ws.chunks.write = write
    return failed


def test_failed_upload_undoes_the_record_and_a_retry_succeeds(env: Env) -> None:
    ws = env.open()
    failed = failing_writes(ws)
    fh = ws.open("v", create=True)
    fh.write(0, b"v" * 300)
    with pytest.raises(StorageError):
        fh.close()
    assert failed and ws.journal_record("v") == {}  # created, nothing acknowledged (as before)
    assert ws.stat("v").size == 300 and fh.read(0, 3) == b"vvv"
    assert "v" not in ws.dirty()
    fh.close()  # the retry (overlapped again: the file is still new)
    ws2 = env.crash_and_reopen(ws)
    with ws2.open("v") as fh2:
        assert fh2.read(0, 400) == b"v" * 300


def test_failed_upload_whose_undo_fails_is_never_flushed_then_emptied_or_dropped(env: Env) -> None:
    ws = env.open()
    with ws.open("keep", create=True) as fh:
        fh.write(0, b"k")
    failing_writes(ws)
    apply = ws.journal.apply

    def broken_undo(doing, fn):
        if doing.startswith("undo of"):
            raise StorageError("injected journal failure")
        return apply(doing, fn)

    ws.journal.apply = broken_undo
    fh = ws.open("v", create=True)
    fh.write(0, b"v" * 300)
    with pytest.raises(StorageError):
        fh.close()
    assert ws.journal_record("v")["unverified"]  # names a chunk that was never stored
    report = ws.flush()  # no error: the untrusted file is skipped, still dirty
    assert report.still_dirty == 1 and report.errors == [] and "v" in ws.dirty()
    assert set(env.origin_files()) == {"keep"}
    # a crash now drops it: its close never returned
    ws2 = env.crash_and_reopen(ws)
    assert {name for name, _ in ws2.listdir()} == {"keep"}

    # the same again, but a namespace operation journals the created file as empty
    failing_writes(ws2)
    apply2 = ws2.journal.apply
    ws2.journal.apply = lambda doing, fn: (
        broken_undo(doing, fn) if doing.startswith("undo") else apply2(doing, fn)
    )
    fh = ws2.open("v", create=True)
    fh.write(0, b"v" * 300)
    with pytest.raises(StorageError):
        fh.close()
    ws2.mkdir("dir")
    rec = ws2.journal_record("v")
    assert rec["size"] == 0 and rec["chunks"] == {} and "unverified" not in rec and rec["unacked"]
    ws3 = env.crash_and_reopen(ws2)
    # no fsync or close of it succeeded: recovery drops the unacked record (revert13; it
    # came back empty before, and was flushed so)
    assert {name for name, _ in ws3.listdir()} == {"keep", "dir"}
    ws3.flush()
    assert set(env.origin_files()) == {"keep"}


def test_failed_journal_commit_keeps_the_file_pending_and_its_uploads_staged(env: Env) -> None:
    ws = env.open()
    submit, calls = ws.journal.submit, []

    def fail(txn):
        raise StorageError("injected journal failure")

    def broken_once(doing, fn, covered=False):
        if doing == "fsync of 'v'" and not calls:
            calls.append(doing)
            return submit(doing, fail, covered)
        return submit(doing, fn, covered)

    ws.journal.submit = broken_once
    real, writes = ws.chunks.write, []
    ws.chunks.write = lambda key, data, path, trailer=b"": (
        writes.append(key),
        real(key, data, path, trailer),
    )[1]
    fh = ws.open("v", create=True)
    fh.write(0, b"v" * 300)
    with pytest.raises(StorageError):
        fh.close()
    assert ws.journal_record("v") == {} and len(writes) == 1
    fh.close()  # retry: the chunk is already stored, only the commit is redone
    assert len(writes) == 1
    rec = ws.journal_record("v")
    assert [k for k, _ in rec["chunks"].values()] == writes and "unverified" not in rec
    ws2 = env.crash_and_reopen(ws)
    with ws2.open("v") as fh2:
        assert fh2.read(0, 400) == b"v" * 300


def test_namespace_operations_and_the_flusher_wait_for_an_overlapped_close(env: Env) -> None:
    """A rename must not be committed while a first close's chunk may still be missing, and
    the flusher must not upload that file before its chunk is durable."""
    ws = env.open()
    with ws.open("old", create=True) as fh:
        fh.write(0, b"old")
    release, stored = threading.Event(), threading.Event()
    real = ws.chunks.write

    def slow_write(key, data, path, trailer=b""):
        release.wait()
        real(key, data, path, trailer)
        stored.set()

    ws.chunks.write = slow_write
    committed = threading.Event()
    submit = ws.journal.submit

    def commit_hook(doing, fn, covered=False):
        request = submit(doing, fn, covered)
        threading.Thread(target=lambda: (request.wait(), committed.set()), daemon=True).start()
        return request

    ws.journal.submit = commit_hook
    fh = ws.open("v", create=True)
    fh.write(0, b"new")
    closer = threading.Thread(target=fh.close, daemon=True)
    seen = {}

    def rename() -> None:
        ws.rename("v", "old")  # replaces an acknowledged file: only after v is durable
        seen["stored"] = stored.is_set()

    renamer = threading.Thread(target=rename, daemon=True)
    closer.start()
    try:
        wait_for(committed.is_set, "the first close's journal commit")
        report = ws.flush()  # the record is journaled, its chunk is not stored yet
        assert report.still_dirty == 1 and "v" not in env.origin_files()
        renamer.start()
        wait_for(lambda: ws.overlay.ns_waiting or not renamer.is_alive(), "the rename to wait or finish")
    finally:
        release.set()  # never leave the close stuck, even when an assertion failed
        closer.join()
        if renamer.ident is not None:  # started
            renamer.join()
    assert seen == {"stored": True}
    ws2 = env.crash_and_reopen(ws)
    with ws2.open("old") as fh2:
        assert fh2.read(0, 10) == b"new"
    ws2.flush()
    assert set(env.origin_files()) == {"old"}


def test_a_waiting_namespace_operation_sends_new_closes_the_sequential_way(env: Env) -> None:
    ws = env.open()
    with ws.overlay.cond:
        ws.overlay.ns_waiting += 1
    try:
        with ws.open("s", create=True) as fh:
            fh.write(0, b"s")
    finally:
        with ws.overlay.cond:
            ws.overlay.ns_waiting -= 1
    assert "unverified" not in ws.journal_record("s")


def test_concurrent_first_closes_and_namespace_operations_lose_nothing(env: Env) -> None:
    """Writers close new files (overlapped or, while a namespace operation waits, sequential)
    as another thread renames and creates directories; after a crash every acknowledged
    file is whole and no record is left unverified."""
    ws = env.open()
    for w in range(3):
        ws.mkdir(f"w{w}")
    acked: dict[str, bytes] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(25):
                data = bytes([w, i]) * (CHUNK // 2 + 37 * i)  # one to several chunks
                with ws.open(f"w{w}/f{i}", create=True) as fh:
                    fh.write(0, data)
                with lock:
                    acked[f"w{w}/f{i}"] = data
        except BaseException as exc:
            errors.append(exc)

    def namespace() -> None:
        try:
            for i in range(25):
                ws.mkdir(f"n{i}")
                ws.rename(f"n{i}", f"m{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    threads.append(threading.Thread(target=namespace))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ws2 = env.crash_and_reopen(ws)
    for path, data in acked.items():
        with ws2.open(path) as fh:
            assert fh.read(0, len(data) + 1) == data, path
    with ws2.journal.read() as txn:
        assert not [rec for _, rec in txn.files() if rec.get("unverified")]
    ws2.flush()
    files = env.origin_files()
    assert set(files) == set(acked)
