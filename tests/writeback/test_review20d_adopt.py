"""review20d: a record that landed in the shared log but whose LMDB commit never ran, and the
next open's recovery, which deletes that transaction's chunks as orphans before it writes
the checkpoint that supersedes the record.

The shared log's record goes to the shared tier before LMDB commits (``Journal.write``); a
record whose commit then fails is voided by the *next* record, so a kill between the
record's landing and the commit leaves it in the log, unvoided (``SharedLog.void`` never
runs). The next open's recovery
(``_recover``) finds the chunks that transaction uploaded unreferenced in LMDB and deletes
them; only after recovery does ``shared_log.attach`` write the new checkpoint. If that open
dies in between (a kill, or the checkpoint cannot be written) and the node is lost, the
adoption reads the old log, applies the unvoided record, finds its chunk missing, and
adopts nothing: every acknowledged file of the lost journal with it. Real local tiers,
the failures injected (the LMDB commit after the landing; the attach after recovery).
Failed before the fix (StorageError: the chunk of 'x' missing, nothing adopted); recovery's
deletion of orphans and garbage now runs once the new checkpoint is whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from datahub.errors import StorageError
from datahub.writeback import open_workspace, shared_log, workspace_dir
from datahub.writeback.adopt import adopt_journal
from tests.writeback.test_nodeloss20 import WS, Nodes, _files, _put


class _Killed(Exception):
    """The process died between the record's landing and LMDB's commit."""


def test_an_unvoided_record_whose_chunks_recovery_deleted_does_not_stop_the_adoption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = Nodes(tmp_path, {"writeback_pack_bytes": 0})
    try:
        a = open_workspace(WS, n.config["a"], n.stores["a"])
        _put(a, "keep", b"acknowledged, never flushed")
        _put(a, "x", b"v1, acknowledged")
        journal = a.chunks.journal
        shipper = a.journal.shipper
        real_landed = type(shipper).landed

        def landed_then_killed(self, token, doing):
            real_landed(self, token, doing)
            raise _Killed("killed after the record landed, before LMDB committed")

        monkeypatch.setattr(type(shipper), "landed", landed_then_killed)
        monkeypatch.setattr(type(shipper), "void", lambda self, token: None)  # dead: no void written
        with pytest.raises(_Killed):
            _put(a, "x", b"v2, never acknowledged: its close failed")
        monkeypatch.undo()
        a.abandon()  # the kill: no later record voids it

        def attach_killed(ws, objects_url):
            raise StorageError("test: killed after recovery, before the checkpoint")

        monkeypatch.setattr(shared_log, "attach", attach_killed)
        with pytest.raises(StorageError, match="before the checkpoint"):
            open_workspace(WS, n.config["a"], n.stores["a"])  # recovery ran: orphans deleted
        monkeypatch.undo()
        shutil.rmtree(workspace_dir(n.config["a"], WS))  # the node is lost

        b = n.open("b")
        try:
            adopt_journal(b, journal, n.stores["b"])
            assert _files(b)["keep"] == b"acknowledged, never flushed"
            assert _files(b)["x"] in (b"v1, acknowledged", b"v2, never acknowledged: its close failed")
        finally:
            b.close()
    finally:
        n.close()
