"""wbreview71: ``FileHandle.fsync`` returns while another handle keeps writing the file, and
what was written before it is journaled when it returns (a crash after keeps it).

Before, the fsync waited until no write-behind upload of the file was in flight, and a writer
that kept filling chunks (each starts an upload) kept one in flight nearly always: the fsync
returned only once the writer stopped. Through a mount the same wait starved a close(2)
(tests/fuse/test_wbreview71_starved_fsync.py).
"""

from __future__ import annotations

import threading

from tests.writeback.conftest import CHUNK, Env

BOUND = 60.0  # how long the fsync may take under the writer (before: until the writer stopped)
MARK = b"written before the fsync"


def test_an_fsync_returns_beside_a_writer_that_never_pauses(env: Env) -> None:
    ws = env.open()
    writer, syncer = ws.open("f", create=True), None
    writer.write(0, b"\0" * CHUNK)
    writer.fsync()
    stop, writes, errors = threading.Event(), [0], []

    def write_on() -> None:
        try:
            pos = 0
            while not stop.is_set():  # full chunks past the first: a write-behind upload each
                writer.write(CHUNK + pos, b"w" * CHUNK)
                pos = (pos + CHUNK) % (256 * CHUNK)
                writes[0] += 1
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    thread = threading.Thread(target=write_on, name="busy-writer", daemon=True)
    thread.start()
    try:
        while writes[0] < 500 and thread.is_alive():
            threading.Event().wait(0.01)
        syncer = ws.open("f")
        syncer.write(0, MARK)
        done = threading.Event()
        threading.Thread(target=lambda: (syncer.fsync(), done.set()), name="fsyncer", daemon=True).start()
        returned = done.wait(BOUND) and thread.is_alive()
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert done.wait(60), "the fsync never returned, even once the writer stopped"
    assert returned, f"the fsync did not return in {BOUND:.0f} s beside the writer ({writes[0]} writes)"
    ws = env.crash_and_reopen(ws)  # no close: only what the fsync acknowledged
    try:
        with ws.open("f") as fh:
            assert fh.read(0, len(MARK)) == MARK, "the fsync returned 0 without the write made before it"
    finally:
        ws.close()


def test_a_revert_returns_beside_a_writer_that_never_pauses(env: Env) -> None:
    """``Workspace.revert`` (a close refused for space: docs/writeback.md, "Out of space at
    close") beside a handle that keeps filling chunks: it waited, like the fsync, until no
    write-behind upload was in flight, and did not return while the other handle wrote. (A
    mount's refused close did return on the daemon path in three runs: its WRITEs leave gaps.)
    After it the file reads as its last acknowledged state (what the writer wrote since is its
    own, uncommitted), and a crash keeps that."""
    ws = env.open()
    acked = b"a" * (2 * CHUNK)
    writer = ws.open("f", create=True)
    writer.write(0, acked)
    writer.fsync()
    stop, writes, errors = threading.Event(), [0], []

    def write_on() -> None:
        try:
            pos = 0
            while not stop.is_set():
                writer.write(4 * CHUNK + pos, b"w" * CHUNK)
                pos = (pos + CHUNK) % (256 * CHUNK)
                writes[0] += 1
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    thread = threading.Thread(target=write_on, name="busy-writer", daemon=True)
    thread.start()
    done = threading.Event()
    try:
        while writes[0] < 500 and thread.is_alive():
            threading.Event().wait(0.01)
        threading.Thread(target=lambda: (ws.revert("f"), done.set()), name="reverter", daemon=True).start()
        returned = done.wait(BOUND) and thread.is_alive()
        stop.set()
        thread.join(60)
        assert not errors, errors
        assert done.wait(60), "the revert never returned, even once the writer stopped"
        assert returned, f"the revert did not return in {BOUND:.0f} s beside the writer ({writes[0]} writes)"
        assert ws.journal_record("f")["size"] == len(acked)
        reader = ws.open("f")  # what the writer wrote since the revert is its own to commit
        try:
            assert reader.read(0, len(acked)) == acked
        finally:
            reader.close(commit=False)
    finally:
        stop.set()
    ws = env.crash_and_reopen(ws)
    try:
        with ws.open("f") as fh:
            assert fh.read(0, 3 * CHUNK) == acked
    finally:
        ws.close()
