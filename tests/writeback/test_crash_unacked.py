"""A created file that no fsync or close of its own acknowledged is absent after a crash,
whatever namespace operation ran beside it (revert13). A namespace operation journals every
created file as an empty record marked ``unacked`` (so it sees one namespace); recovery
drops those records, name and all. Before, such a file came back empty under its name when
any rename, unlink or mkdir had happened to run while it was open, and was absent when
none had: a crash's outcome depended on unrelated operations, and an empty file looked
like a finished output. What a namespace operation or a close acknowledged stays.
"""

from __future__ import annotations

import os

import pytest

from datahub.errors import NotFound
from datahub.writeback import Workspace
from tests.writeback.conftest import CHUNK, Env


def _names(ws: Workspace, directory: str = "") -> list[str]:
    return sorted(name for name, _ in ws.listdir(directory))


def _content(ws: Workspace, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size)


def test_a_created_file_a_rename_of_another_journaled_is_absent_after_a_crash(env: Env) -> None:
    ws = env.open()
    ws.mkdir("d")
    stream = ws.open("d/stream.bin", create=True)
    stream.write(0, os.urandom(3 * CHUNK + 1))  # never fsynced nor closed
    with ws.open("old-name", create=True) as other:
        other.write(0, b"acknowledged")
    ws.rename("old-name", "new-name")  # journals d/stream.bin, empty and unacked
    assert ws.journal_record("d/stream.bin")["unacked"]
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == ["d", "new-name"] and _names(ws2, "d") == []
    assert _content(ws2, "new-name") == b"acknowledged"
    with pytest.raises(NotFound):
        ws2.stat("d/stream.bin")


def test_a_created_file_renamed_while_open_is_absent_after_a_crash(env: Env) -> None:
    """The rename acknowledged the move (the file it replaced is gone), not the moved
    file's bytes nor its existence: nothing of it was ever fsynced or closed."""
    ws = env.open()
    with ws.open("final", create=True) as fh:
        fh.write(0, b"the old final")
    tmp = ws.open("tmp", create=True)
    tmp.write(0, os.urandom(CHUNK + 3))
    ws.rename("tmp", "final")
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == []


def test_a_created_file_a_namespace_operation_journaled_then_closed_stays(env: Env) -> None:
    """Its close acknowledged it: its bytes, or, written nothing, an empty file."""
    ws = env.open()
    data = os.urandom(2 * CHUNK + 7)
    full = ws.open("full", create=True)
    full.write(0, data)
    empty = ws.open("empty", create=True)
    ws.mkdir("d")  # journals both, unacked
    full.close()
    empty.close()
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == ["d", "empty", "full"]
    assert _content(ws2, "full") == data and ws2.stat("empty").size == 0


def test_an_acknowledged_file_open_across_a_namespace_operation_and_a_crash_keeps_its_bytes(
    env: Env,
) -> None:
    """Only created files are journaled unacked: a file with an acknowledged record, opened
    and written again, is back to that record after a crash."""
    ws = env.open()
    acked = os.urandom(CHUNK + 5)
    with ws.open("f", create=True) as fh:
        fh.write(0, acked)
    fh = ws.open("f")
    fh.write(0, os.urandom(2 * CHUNK))
    ws.mkdir("d")
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == ["d", "f"] and _content(ws2, "f") == acked


def test_the_origin_object_of_a_dropped_file_goes_at_the_next_flush(env: Env) -> None:
    """A flush while the file was open put its journaled (empty) record in the origin; once
    recovery dropped the file, the next flush deletes that object."""
    ws = env.open()
    stream = ws.open("stream.bin", create=True)
    stream.write(0, os.urandom(CHUNK))
    with ws.open("kept", create=True) as fh:
        fh.write(0, b"kept")
    ws.mkdir("d")
    ws.flush()
    ws2 = env.crash_and_reopen(ws)
    ws2.flush()
    assert sorted(env.origin_files()) == ["kept"]


def test_a_file_no_fsync_or_close_acknowledged_is_neither_flushed_nor_committed(env: Env, catalog) -> None:
    """revert13's finding: a namespace operation journals the open created file empty and
    ``unacked``, and the flusher uploaded that record, so the origin held an empty
    checkpoint.bin, it counted as clean, and ``commit_workspace`` pinned an empty file no
    close had acknowledged into a version. Its path stays out of the origin (and a version)
    until its own close; an object an earlier file left at that path is deleted, since the
    unlink that removed that file was acknowledged."""
    from datahub.workspaces import commit_workspace

    ws = env.open()
    with ws.open("checkpoint.bin", create=True) as old:
        old.write(0, b"the previous run's checkpoint")
    ws.flush()
    assert len(env.origin_files()) == 1
    v1 = commit_workspace(ws, catalog, "outputs")
    assert [r.key for r in catalog.list_records("outputs", v1.seq)] == ["checkpoint.bin"]
    ws.unlink("checkpoint.bin")
    fh = ws.open("checkpoint.bin", create=True)
    data = os.urandom(100_000)
    fh.write(0, data)  # still being written: never fsynced nor closed
    ws.mkdir("logs")  # any namespace operation journals it, empty and unacked
    ws.flush()
    assert env.origin_files() == {}
    assert ws.dirty() == []
    assert [o.path for o in ws.flushed_objects()] == []
    version = commit_workspace(ws, catalog, "outputs")
    assert [r.key for r in catalog.list_records("outputs", version.seq)] == []
    fh.close()  # acknowledged now: flushed and committed whole
    ws.flush()
    assert [o.path for o in ws.flushed_objects()] == ["checkpoint.bin"]
    version = commit_workspace(ws, catalog, "outputs")
    (record,) = catalog.list_records("outputs", version.seq)
    assert (record.key, record.size) == ("checkpoint.bin", len(data))
    ws.close()
