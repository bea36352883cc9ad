"""review20d: the collector asks which files are open, but not which are being opened.

``Workspace._acquire`` reads a closed file's record between ``Overlay.begin_acquire`` (the
id counted in ``_opening``) and ``finish_acquire`` (the id in ``_open``). The collector
(``Flusher.gc``) keeps the garbage of the files in ``open_files()`` (``_open``) only. An
unlink that commits in that window (the record was read before it) lists the file's chunks
as garbage; a collection then deletes them, and the handle the open returns names chunks
that are gone: reads of a file whose open succeeded fail. The evictor already stays away
from ``_opening`` ids (``begin_evict``). One chunk file per chunk (deleted at once); real
local stores and journal; the window is entered by running the unlink and the collection
from inside ``finish_acquire`` (no timing). Failed before the fix (ObjectNotFound on
read); the collector now keeps the garbage of ``held_ids()``, open or being opened.
"""

from __future__ import annotations

import pytest

from datahub.writeback.overlay import Overlay
from tests.writeback.conftest import CHUNK, Env, write


def test_a_file_unlinked_while_being_opened_keeps_its_chunks_for_that_handle(
    unpacked_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = unpacked_env.open(background=False)
    data = bytes(range(256)) * (3 * CHUNK // 256)
    write(ws, "f", data)
    assert ws.flush().errors == []
    real = Overlay.finish_acquire
    done = []

    def finish_acquire(overlay: Overlay, file_id: int, make):
        if not done:  # the record is read; the unlink and a collection run before the handle exists
            done.append(file_id)
            ws.unlink("f")
            ws.flusher.gc()
        return real(overlay, file_id, make)

    monkeypatch.setattr(Overlay, "finish_acquire", finish_acquire)
    with ws.open("f") as fh:  # the open returned before the unlink: its handle reads the bytes
        assert done
        assert fh.read(0, len(data)) == data
