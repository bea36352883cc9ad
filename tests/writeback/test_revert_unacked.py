"""A file that a namespace operation wrote into the journal as empty, with nothing of it
acknowledged (no fsync or close of its own succeeded), goes at a revert, as a created file
still in the overlay does (docs/writeback.md, "Out of space at close"); an empty file a
close did acknowledge stays (revert12)."""

from __future__ import annotations

import os

from tests.writeback.conftest import CHUNK, Env


def _names(ws) -> list[str]:
    return [name for name, _ in ws.listdir("")]


def test_a_created_file_a_rename_of_another_journaled_empty_is_removed_by_a_revert(env: Env) -> None:
    """The lead's suite (review11's kill -9 test, under load): a close of big.bin failed for
    space while small files were renamed and unlinked beside it, and after kill -9 big.bin
    came back empty: the rename had journaled it (empty), and the revert took that record
    for its last acknowledged state."""
    ws = env.open()
    big = ws.open("big.bin", create=True)
    big.write(0, os.urandom(3 * CHUNK + 7))  # never fsynced
    with ws.open("old-name", create=True) as other:
        other.write(0, b"acknowledged")
    ws.rename("old-name", "new-name")  # a namespace transaction journals big.bin, empty
    assert ws.revert("big.bin") is True
    big.close()
    assert _names(ws) == ["new-name"]
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == ["new-name"]


def test_an_empty_file_its_close_acknowledged_after_a_rename_journaled_it_survives_a_revert(
    env: Env,
) -> None:
    """The other side: a file a namespace operation journaled, then closed with nothing
    written, was acknowledged (empty) by that close; a later failed close of a rewrite puts
    it back empty, never removes it."""
    ws = env.open()
    fh = ws.open("empty", create=True)
    ws.mkdir("d")  # journals "empty" as an empty file, unacknowledged
    fh.close()  # acknowledges it, empty
    again = ws.open("empty")
    again.write(0, os.urandom(CHUNK))
    assert ws.revert("empty") is False
    again.close()
    assert ws.stat("empty").size == 0
    ws2 = env.crash_and_reopen(ws)
    assert sorted(_names(ws2)) == ["d", "empty"] and ws2.stat("empty").size == 0


def test_an_acknowledged_file_truncated_while_a_rename_ran_is_put_back_by_a_revert(env: Env) -> None:
    """O_TRUNC of an acknowledged file, a namespace operation meanwhile: the revert puts
    back the acknowledged bytes."""
    ws = env.open()
    acked = os.urandom(2 * CHUNK + 3)
    with ws.open("f", create=True) as fh:
        fh.write(0, acked)
    fh = ws.open("f")
    fh.truncate(0)
    fh.write(0, os.urandom(CHUNK))
    ws.mkdir("d")
    assert ws.revert("f") is False
    fh.close()
    with ws.open("f") as fh:
        assert fh.read(0, len(acked) + 10) == acked
    ws2 = env.crash_and_reopen(ws)
    with ws2.open("f") as fh:
        assert fh.read(0, len(acked) + 10) == acked


def test_a_revert_that_removes_a_file_journals_no_other_created_file(env: Env) -> None:
    """The removal is on behalf of one failed close: a file created meanwhile and never
    acknowledged (review11's open stream, ``unacked.bin``) stays out of the journal, so a
    crash loses it as before, instead of bringing it back empty."""
    ws = env.open()
    big = ws.open("big.bin", create=True)
    big.write(0, os.urandom(CHUNK + 1))
    ws.mkdir("d")  # journals big.bin, empty and unacknowledged
    stream = ws.open("unacked.bin", create=True)
    stream.write(0, os.urandom(CHUNK))  # never fsynced nor closed
    assert ws.revert("big.bin") is True
    big.close()
    assert sorted(_names(ws)) == ["d", "unacked.bin"]
    ws2 = env.crash_and_reopen(ws)
    assert _names(ws2) == ["d"]
