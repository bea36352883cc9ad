"""Review of nodeloss20: an open's recovery deleted chunks the newest whole shared log still
named, so one unacknowledged change blocked the adoption of every acknowledged file.

A write transaction's record lands in the shared log before LMDB commits it; a node killed -9
in between leaves a record whose change LMDB never got (its close never returned: allowed to
be adopted or not). The node's next open runs recovery, which deletes the chunks LMDB does not
name (that change's new chunk among them), and only then writes the new checkpoint that
replaces the old log. If that checkpoint is not written (the shared tier refuses it, or the
node dies during it: it takes O(files)), the newest whole log is still the old one, naming a
chunk recovery deleted. The adoption then refused everything ("missing or short in the shared
tier; nothing was adopted"): every acknowledged file of the lost node, for one change that was
never acknowledged. Real processes and stores: node a is killed -9 right after its record
landed; its next open fails at the checkpoint because the shared tier holds a file where the
checkpoint's directory goes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from datahub.errors import StorageError
from datahub.writeback import open_workspace, shared_log, workspace_dir
from datahub.writeback.adopt import adopt_journal
from tests.writeback.conftest import LAYOUTS
from tests.writeback.test_nodeloss20 import REPO, WS, Nodes, _files

#: node a: two acknowledged files, then an overwrite killed -9 once its log record landed,
#: before LMDB committed it; prints its journal id first
NODE_A = r"""
import json, os, signal, sys
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace, shared_log

args = json.loads(sys.argv[1])
config = load_config(env={}, overrides=args["overrides"])
ws = open_workspace("shared", config, StoreRegistry(config))

def put(path, data):
    with ws.open(path, create=True, truncate=True) as fh:
        fh.write(0, data)

put("keep", b"acknowledged, never touched again")
put("x", b"v1, acknowledged")
print(ws.chunks.journal, flush=True)
real = shared_log.SharedLog.landed

def landed(self, token, doing):
    real(self, token, doing)
    os.kill(os.getpid(), signal.SIGKILL)  # the record is durable; LMDB never commits it

shared_log.SharedLog.landed = landed
put("x", b"v2, its close never returned")
"""


def test_an_unacknowledged_record_whose_chunk_recovery_deleted_does_not_block_the_adoption(
    tmp_path: Path,
) -> None:
    n = Nodes(tmp_path, LAYOUTS["chunk files"])
    try:
        args = {"overrides": n.overrides["a"]}
        proc = subprocess.run(
            [sys.executable, "-c", NODE_A, json.dumps(args)], cwd=REPO, capture_output=True, text=True
        )
        assert proc.returncode == -9, proc.stderr
        journal = proc.stdout.split()[0]
        log = tmp_path / "shared-tier" / shared_log.LOG_ROOT / WS / f"j-{journal}"
        (base,) = (p.name for p in log.iterdir())
        epoch = int(base.partition("-")[0], 16)
        # the shared tier refuses the next session's checkpoint: a file where its directory goes
        (log / f"{epoch + 1:08x}-{0:08x}").write_bytes(b"")
        with pytest.raises(StorageError, match="shared log .* could not be written"):
            open_workspace(WS, n.config["a"], n.stores["a"])  # recovery ran; the checkpoint did not
        shutil.rmtree(workspace_dir(n.config["a"], WS))  # node a is lost now
        b = n.open("b")
        try:
            adopt_journal(b, journal, n.stores["b"])
            got = _files(b)
            assert got["keep"] == b"acknowledged, never touched again"
            assert got["x"] in (b"v1, acknowledged", b"v2, its close never returned")
        finally:
            b.close()
    finally:
        n.close()


class _SyncFails:
    """The journal's LMDB environment whose next ``sync`` fails (the node's disk refused the
    flush: EIO), after the transaction before it committed; everything else is LMDB's own."""

    def __init__(self, env) -> None:
        self._env = env
        self.failed = False

    def sync(self, force: bool = False) -> None:
        if not self.failed:
            self.failed = True
            raise lmdb.Error("mdb_env_sync: Input/output error")
        self._env.sync(force)

    def __getattr__(self, name: str):
        return getattr(self._env, name)


def test_a_change_lmdb_committed_is_not_voided_in_the_log_when_only_its_flush_failed(tmp_path: Path) -> None:
    """A transaction whose LMDB commit succeeded and whose ``sync`` then failed was voided in
    the shared log ("never happened") while LMDB kept it, and every later transaction built on
    it: the unlinked file's chunk went with the garbage, and the log, which still had the
    file, made the adoption refuse every acknowledged file."""
    n = Nodes(tmp_path, LAYOUTS["chunk files"])
    try:
        a = n.open_plain("a")
        try:
            # 'x' written twice: its record is a verified one (a first commit's, unverified, is
            # left out by an adoption that misses its chunk, as a close that never returned)
            for path, data in (("keep", b"acknowledged"), ("x", b"v1"), ("x", b"unlinked")):
                with a.open(path, create=True, truncate=True) as fh:
                    fh.write(0, data)
            failing = _SyncFails(a.journal._env)
            a.journal._env = failing
            with pytest.raises(StorageError):
                a.unlink("x")  # committed in LMDB; its flush failed
            assert failing.failed
            assert sorted(_files(a)) == ["keep"]  # this node goes on without 'x'
            a.flusher.gc()  # 'x''s chunk was garbage of a committed transaction
            journal = a.chunks.journal
        finally:
            a.abandon()
        shutil.rmtree(workspace_dir(n.config["a"], WS))
        b = n.open("b")
        try:
            adopt_journal(b, journal, n.stores["b"])
            got = _files(b)
            assert got["keep"] == b"acknowledged" and got.get("x") in (None, b"unlinked")
        finally:
            b.close()
    finally:
        n.close()
