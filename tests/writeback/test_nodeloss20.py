"""A lost node's acknowledged files survive (nodeloss20; promise 3 of docs/architecture.md).

Node a (a real process) writes and closes files of every kind into a workspace on a shared
tier and a catalog it shares with node b, is killed -9, and its journal directory goes (the
node's disk is lost). Node b takes the lapsed lease, adopts node a's journal from the shared
tier alone (``adopt_journal``: its shared log and cover records), sees every acknowledged file
byte for byte and nothing unacknowledged, and commits them. Node a's stale journal, back
later, is refused. Before nodeloss20 nothing in the shared tier named those files: the
adoption has no log to read (NotFound), and b's workspace starts empty.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.cli.main import main
from datahub.config import load_config
from datahub.errors import Conflict, NotFound, StorageError
from datahub.storage import StoreRegistry
from datahub.workspaces import commit_workspace
from datahub.writeback import open_workspace, shared_log, workspace_dir
from datahub.writeback.adopt import adopt_journal
from datahub.writeback.journals import forget_journal, journal_prefix
from tests.writeback.conftest import CHUNK
from tests.writeback.test_commit_history import read_version
from tests.writeback.test_lease import Clock

WS = "shared"
REPO = Path(__file__).resolve().parents[2]

#: node a: every kind of acknowledging change, then a file never closed, then two small new
#: files whose first commits stay deferred (only their cover records name them); prints its
#: journal id and waits for the kill
NODE_A = r"""
import json, sys, threading
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.cli.main import main
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace

args = json.loads(sys.argv[1])
config = load_config(env={}, overrides=args["overrides"])
ws = open_workspace("shared", config, StoreRegistry(config), lease=SQLiteCatalogStore(args["catalog"]),
                    lease_ttl=30.0)
chunk = args["chunk"]

def put(path, data):
    with ws.open(path, create=True, truncate=True) as fh:
        fh.write(0, data)

put("over.txt", b"first version, replaced")
put("over.txt", b"second version, acknowledged")
put("app.txt", b"head-")
with ws.open("app.txt") as fh:
    fh.write(5, b"appended tail")
put("big.bin", bytes(range(256)) * (3 * chunk // 256) + b"and a tail")
ws.mkdir("d")
ws.mkdir("d/e")
put("d/e/before.txt", b"renamed, acknowledged")
ws.rename("d/e/before.txt", "d/e/after.txt")
put("gone.txt", b"unlinked")
ws.unlink("gone.txt")
put("trunc.bin", b"t" * (3 * chunk))
ws.truncate("trunc.bin", chunk + chunk // 2)
put("flushed.txt", b"flushed, never committed")
ws.flush()
put("after-flush.txt", b"x" * (2 * chunk + 7))
never = ws.open("open.txt", create=True)
never.write(0, b"written, never closed")
ws.journal.defer_seconds = 3600.0  # the last two stay deferred: only their cover records name them
put("late-1.txt", b"small, closed last")
put("late-2.txt", b"small, closed very last")
print("READY", ws.chunks.journal, ws.journal.deferred(), flush=True)
threading.Event().wait()
"""

EXPECTED = {
    "over.txt": b"second version, acknowledged",
    "app.txt": b"head-appended tail",
    "big.bin": bytes(range(256)) * (3 * CHUNK // 256) + b"and a tail",
    "d/e/after.txt": b"renamed, acknowledged",
    "trunc.bin": b"t" * (CHUNK + CHUNK // 2),
    "flushed.txt": b"flushed, never committed",
    "after-flush.txt": b"x" * (2 * CHUNK + 7),
    "late-1.txt": b"small, closed last",
    "late-2.txt": b"small, closed very last",
}


class Nodes:
    def __init__(self, tmp_path: Path, layout: dict) -> None:
        self.tmp = tmp_path
        self.covered = not layout  # small new files' first commits have cover records (packs)
        self.clock = Clock()
        self.catalog_path = tmp_path / "catalog.db"
        self.leases = SQLiteCatalogStore(self.catalog_path, clock=self.clock)
        self.overrides = {
            name: {
                "home": str(tmp_path / name),
                "objects_url": (tmp_path / "objects").as_uri(),
                "cache": {
                    "page_size": CHUNK,
                    "flush_interval": 3600,
                    **layout,
                    "shared_url": (tmp_path / "shared-tier").as_uri(),
                },
            }  # fmt: skip
            for name in ("a", "b")
        }
        self.config = {name: load_config(env={}, overrides=o) for name, o in self.overrides.items()}
        self.stores = {name: StoreRegistry(c) for name, c in self.config.items()}

    def run_a(self) -> tuple[subprocess.Popen, str, int]:
        """Node a's process, once it has written everything: (process, journal id, deferred)."""
        args = {"overrides": self.overrides["a"], "catalog": str(self.catalog_path), "chunk": CHUNK}
        proc = subprocess.Popen(
            [sys.executable, "-c", NODE_A, json.dumps(args)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("READY"):
            proc.kill()
            raise AssertionError(f"node a failed: {line}{proc.communicate()[1]}")
        _, journal, deferred = line.split()
        return proc, journal, int(deferred)

    def open(self, name: str):
        return open_workspace(WS, self.config[name], self.stores[name], lease=self.leases, lease_ttl=30.0)

    def open_plain(self, name: str):
        """Without a lease (what the CLI opened it with: no catalog)."""
        return open_workspace(WS, self.config[name], self.stores[name])

    def close(self) -> None:
        self.leases.close()
        for stores in self.stores.values():
            stores.close()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    """Packs (the default layout), where new small files have cover records; the layout without
    them is the S3 case of test_nodeloss20_tiers.py and the missing-chunk test here (one real
    node process per run of this file's main test: the suite's time)."""
    n = Nodes(tmp_path, {})
    yield n
    n.close()


def _files(ws) -> dict[str, bytes]:
    out = {}

    def walk(path: str) -> None:
        for name, attr in ws.listdir(path):
            full = f"{path}/{name}" if path else name
            if attr.is_dir:
                walk(full)
            else:
                with ws.open(full) as fh:
                    out[full] = fh.read(0, attr.size + 1)

    walk("")
    return out


def test_a_killed_nodes_acknowledged_files_are_adopted_from_the_shared_tier_alone(nodes: Nodes) -> None:
    proc, a_journal, deferred = nodes.run_a()
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    # with packs, the last two files are in no LMDB transaction, hence in no log record
    covers = 2 if nodes.covered else 0
    assert deferred == covers
    lost = nodes.tmp / "a-journal-lost"
    shutil.move(workspace_dir(nodes.config["a"], WS), lost)  # node a's disk is gone
    with pytest.raises(Conflict):
        nodes.open("b")  # node a still holds the lease
    nodes.clock.now += 60  # ... until it lapses
    ws = nodes.open("b")
    try:
        assert _files(ws) == {}  # a workspace opened on another node starts empty
        report = adopt_journal(ws, a_journal, nodes.stores["b"])
        assert sorted(report.files) == sorted(EXPECTED) and report.covers == covers and not report.dropped
        assert _files(ws) == EXPECTED  # byte for byte; nothing unacknowledged (open.txt, gone.txt)
        assert ws.stat("d/e").is_dir
        assert adopt_journal(ws, a_journal, nodes.stores["b"]).already  # done once
        shared = ws.chunks.store
        catalog = open_catalog(f"sqlite:///{nodes.catalog_path}")
        try:
            commit_workspace(ws, catalog, "run")
            assert read_version(_Env(nodes.stores["b"]), catalog, "run", 1) == EXPECTED
        finally:
            catalog.close()
    finally:
        ws.close()
    # the operator then forgets the lost journal (its chunks and log: the docs' next step); the
    # adoption's marker stays, or node a's stale journal would open against deleted chunks (review21c)
    forget_journal(shared, journal_prefix(nodes.config["b"], shared, WS, a_journal))
    # node a comes back with its stale journal: refused, whatever the lease says
    shutil.move(lost, workspace_dir(nodes.config["a"], WS))
    nodes.clock.now += 60
    with pytest.raises(Conflict, match="adopted by journal"):
        nodes.open("a")


def test_a_journal_without_a_shared_log_cannot_be_adopted_and_nothing_is_written(nodes: Nodes) -> None:
    """What a journal from before nodeloss20 (or a wrong id) gives: NotFound, and b unchanged."""
    ws = nodes.open("b")
    try:
        with pytest.raises(NotFound, match="no whole log"):
            adopt_journal(ws, "0123456789abcdef", nodes.stores["b"])
        assert _files(ws) == {}
    finally:
        ws.close()


class _Env:
    """What ``read_version`` needs of an Env: the stores."""

    def __init__(self, stores: StoreRegistry) -> None:
        self.stores = stores


def test_the_cli_adopts_a_lost_journal_and_forget_journal_deletes_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``datahub cache adopt-journal`` as an operator runs it on node b (with the catalog the
    nodes share: adoption needs the writer lease), then ``forget-journal`` deletes the lost
    journal's prefix and its shared log, all but the adoption's marker."""
    n = Nodes(tmp_path, {})
    try:
        a = open_workspace(WS, n.config["a"], n.stores["a"])
        for path, data in (("ckpt", b"epoch 1"), ("ckpt", b"epoch 2, acknowledged"), ("tmp", b"renamed")):
            with a.open(path, create=True, truncate=True) as fh:
                fh.write(0, data)
        a.rename("tmp", "kept")
        a_journal = a.chunks.journal
        a.abandon()  # what a kill -9 leaves
        shutil.rmtree(workspace_dir(n.config["a"], WS))
        log = tmp_path / "shared-tier" / "writeback-log" / WS / f"j-{a_journal}"
        assert log.is_dir()
        monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
        monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "b"))
        monkeypatch.setenv("DATAHUB_OBJECTS_URL", n.config["b"].resolved_objects_url)
        monkeypatch.setenv("DATAHUB_CACHE_SHARED_URL", n.config["b"].resolved_shared_url)
        monkeypatch.setenv("DATAHUB_CACHE_PAGE_SIZE", str(CHUNK))
        monkeypatch.setenv("DATAHUB_CATALOG_URL", f"sqlite:///{n.catalog_path}")
        assert main(["cache", "adopt-journal", WS, a_journal]) == 0
        assert "adopted journal" in capsys.readouterr().out
        b = n.open_plain("b")
        try:
            assert _files(b) == {"ckpt": b"epoch 2, acknowledged", "kept": b"renamed"}
        finally:
            b.close()
        assert main(["cache", "forget-journal", WS, a_journal, "--yes", "--force"]) == 0
        # the log is gone but for the adoption's marker, which keeps refusing a's journal (review21c)
        assert sorted(p.name for p in log.rglob("*") if p.is_file()) == ["adopted"]
    finally:
        n.close()


def _lost_node_a(n: Nodes, writes) -> str:
    """Node a in this process: ``writes(ws)``, then what a kill -9 and a lost disk leave."""
    a = open_workspace(WS, n.config["a"], n.stores["a"])
    writes(a)
    journal = a.chunks.journal
    a.abandon()
    shutil.rmtree(workspace_dir(n.config["a"], WS))
    return journal


def _put(ws, path: str, data: bytes) -> None:
    with ws.open(path, create=True, truncate=True) as fh:
        fh.write(0, data)


def test_an_acknowledged_chunk_missing_fails_the_adoption_and_nothing_is_written(tmp_path: Path) -> None:
    n = Nodes(tmp_path, {"writeback_pack_bytes": 0})
    try:
        keys = []

        def writes(a) -> None:
            for path, data in (("ok", b"fine"), ("ckpt", b"v1"), ("ckpt", b"v2")):
                _put(a, path, data)
            keys.append(a.journal_record("ckpt")["chunks"]["0"][0])  # the overwrite's: no CRC kept

        journal = _lost_node_a(n, writes)
        (tmp_path / "shared-tier" / keys[0]).unlink()  # the shared tier lost it behind datahub's back
        b = n.open("b")
        try:
            with pytest.raises(StorageError, match="'ckpt'.*nothing was adopted"):
                adopt_journal(b, journal, n.stores["b"])
            assert _files(b) == {}
        finally:
            b.close()
        marker = tmp_path / "shared-tier" / "writeback-log" / WS / f"j-{journal}" / "adopted"
        assert not marker.exists()  # the lost journal's own open is not refused: nothing moved
    finally:
        n.close()


def test_a_record_torn_by_the_crash_ends_the_log_and_the_changes_before_it_are_adopted(
    tmp_path: Path,
) -> None:
    n = Nodes(tmp_path, {})
    try:
        journal = _lost_node_a(n, lambda a: (_put(a, "x", b"v1"), _put(a, "x", b"v2"), a.rename("x", "y")))
        (log,) = (tmp_path / "shared-tier" / "writeback-log" / WS / f"j-{journal}").glob("*/log")
        os.truncate(log, log.stat().st_size - 3)  # the rename's record cut short
        b = n.open("b")
        try:
            report = adopt_journal(b, journal, n.stores["b"])
            assert _files(b) == {"x": b"v2"} and report.files == ["x"]
        finally:
            b.close()
    finally:
        n.close()


def test_a_newer_file_written_here_since_the_takeover_is_not_replaced_unless_asked(tmp_path: Path) -> None:
    n = Nodes(tmp_path, {})
    try:
        journal = _lost_node_a(n, lambda a: (_put(a, "ckpt", b"node a's, older"), _put(a, "log", b"a")))
        b = n.open("b")
        try:
            _put(b, "ckpt", b"node b's, written since the takeover")
            with pytest.raises(Conflict, match="'ckpt'.*nothing was adopted"):
                adopt_journal(b, journal, n.stores["b"])
            assert _files(b) == {"ckpt": b"node b's, written since the takeover"}
            _put(b, "log", b"a")  # the same bytes: taken as adopted already
            report = adopt_journal(b, journal, n.stores["b"], replace=True)
            assert sorted(report.files) == ["ckpt", "log"]
            assert _files(b) == {"ckpt": b"node a's, older", "log": b"a"}
        finally:
            b.close()
    finally:
        n.close()


def test_a_long_session_compacts_its_log_and_the_compacted_log_is_adopted_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``COMPACT_RECORDS`` records a new checkpoint replaces them (GC within a session), and
    what an adopter reads after it is the same files."""
    monkeypatch.setattr(shared_log, "COMPACT_RECORDS", 4)
    n = Nodes(tmp_path, {})
    try:

        def writes(a) -> None:
            for i in range(12):
                _put(a, f"f{i % 3}", f"version {i}".encode())
                a.rename(f"f{i % 3}", f"g{i % 3}")
                a.rename(f"g{i % 3}", f"f{i % 3}")
            compactor = a.journal.shipper._compactor
            assert compactor is not None
            compactor.join()

        journal = _lost_node_a(n, writes)
        bases = [p.name for p in (tmp_path / "shared-tier" / "writeback-log" / WS / f"j-{journal}").iterdir()]
        assert len(bases) == 1 and not bases[0].endswith("-00000000"), bases  # the open's base is gone
        b = n.open("b")
        try:
            adopt_journal(b, journal, n.stores["b"])
            assert _files(b) == {"f0": b"version 9", "f1": b"version 10", "f2": b"version 11"}
        finally:
            b.close()
    finally:
        n.close()


def test_an_evicted_file_and_the_lost_journals_commits_are_adopted(tmp_path: Path) -> None:
    """A file the lost node had flushed and evicted (its bytes only in its flushed object) comes
    back from that object; the lost journal's merge bases come too, so the adopter's commit
    deletes what the lost node had committed and then removed, as its own commit would have."""
    n = Nodes(tmp_path, {})
    catalog = open_catalog(f"sqlite:///{n.catalog_path}")
    try:

        def writes(a) -> None:
            _put(a, "evicted", b"e" * (2 * CHUNK + 3))
            _put(a, "removed", b"committed, then unlinked")
            commit_workspace(a, catalog, "run")
            assert a.flusher.evict(0) > 0
            a.unlink("removed")

        journal = _lost_node_a(n, writes)
        b = n.open("b")
        try:
            adopt_journal(b, journal, n.stores["b"])
            assert _files(b) == {"evicted": b"e" * (2 * CHUNK + 3)}
            commit_workspace(b, catalog, "run")
            assert read_version(_Env(n.stores["b"]), catalog, "run", 2) == {"evicted": b"e" * (2 * CHUNK + 3)}
        finally:
            b.close()
    finally:
        catalog.close()
        n.close()
