"""Nodes sharing one shared tier keep their chunks apart (takeover16).

Two nodes share a catalog (the writer lease) and a shared tier, as csi/deploy/config.yaml
ships them. Each journal writes its chunks under its own prefix,
``writeback/<workspace>/j-<journal id>/``, and a recovery deletes unreferenced objects under
that prefix only: another node's chunk may be an acknowledged file it has not flushed yet.
review16's ``test_a_takeover_on_a_node_sharing_the_shared_tier_keeps_the_lapsed_nodes_acknowledged_file``
(tests/writeback/test_review16.py) is node a's side; these are node b's side, what stays
bounded, and journals from before the prefixes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import datahub.writeback.chunks as chunks_module
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace, workspace_dir
from datahub.writeback.journal import JOURNAL_ID, Journal
from tests.writeback.conftest import CHUNK, LAYOUTS, UNKEYED, write
from tests.writeback.flushed import only_copy
from tests.writeback.test_cover import _another_boot
from tests.writeback.test_lease import Clock

#: The lease's ttl here: these tests lapse a lease by moving the catalog's clock 60 s (``lapse``),
#: never by waiting, so a ttl of 3 s only let a loaded machine's 3 s stall of the renewal thread
#: fence a node mid-test (seen at load 26-27 in test_review17a's tier variants).
LEASE_TTL = 30.0


class Nodes:
    """Nodes a and b over one catalog (leases on a clock the test moves) and one shared tier."""

    def __init__(self, tmp_path: Path, layout: dict) -> None:
        self.tmp = tmp_path
        self.clock = Clock()
        self.catalog = SQLiteCatalogStore(tmp_path / "catalog.db", clock=self.clock)
        self.nodes = {}
        for name in ("a", "b"):
            config = load_config(
                env={},
                overrides={"home": str(tmp_path / name), "objects_url": (tmp_path / "objects").as_uri(),
                           "cache": {"page_size": CHUNK, "flush_interval": 3600, **layout,
                                     "shared_url": (tmp_path / "shared-tier").as_uri()}},
            )  # fmt: skip
            self.nodes[name] = (config, StoreRegistry(config))

    def open(self, name: str):
        config, stores = self.nodes[name]
        return open_workspace("shared", config, stores, lease=self.catalog, lease_ttl=LEASE_TTL)

    def lapse(self) -> None:
        """The holder's lease lapses in the catalog's eyes (a partition, a stalled node)."""
        self.clock.now += 60

    def shared(self) -> set[str]:
        """Every file in the shared tier, relative to it."""
        root = self.tmp / "shared-tier"
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}

    def flushed(self, path: str) -> bytes:
        return only_copy(self.tmp / "objects" / "workspaces" / "shared", path)

    def close(self) -> None:
        self.catalog.close()
        for _config, stores in self.nodes.values():
            stores.close()


@pytest.fixture(params=list(LAYOUTS))
def nodes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Nodes]:
    n = Nodes(tmp_path, LAYOUTS[request.param])
    yield n
    n.close()


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 20)


def test_the_lapsed_taker_overs_file_survives_the_first_nodes_recovery(nodes: Nodes) -> None:
    """The reverse of review16's case: node b took the workspace over, acknowledged a file
    and lapsed before its flush; node a's open (its recovery) must leave b's chunks, which
    b's journal still names, and b's file reaches the bucket once b holds the lease again."""
    ws_a = nodes.open("a")
    write(ws_a, "a.txt", b"node a's file")
    nodes.lapse()
    ws_a.abandon()
    ws_b = nodes.open("b")
    write(ws_b, "b.txt", b"node b's file, acknowledged before its lease lapsed" * 200)
    nodes.lapse()
    ws_b.abandon()
    ws_a = nodes.open("a")  # a's recovery: b's chunks are not a's to judge
    try:
        assert _read(ws_a, "a.txt") == b"node a's file"
    finally:
        ws_a.close()
    assert nodes.flushed("a.txt") == b"node a's file"
    nodes.lapse()
    ws_b = nodes.open("b")
    try:
        assert _read(ws_b, "b.txt") == b"node b's file, acknowledged before its lease lapsed" * 200
    finally:
        ws_b.close()
    assert nodes.flushed("b.txt") == b"node b's file, acknowledged before its lease lapsed" * 200


def test_a_nodes_crash_leftovers_outlive_other_recoveries_and_go_at_its_own(tmp_path: Path) -> None:
    """What bounds a dead writer's uploads: an object under b's prefix that no record names
    (an upload of a writer killed before its commit) is not deleted by a's recovery (a cannot
    tell it from b's acknowledged chunks), and b's next open deletes it. One chunk file each
    (a pack member is a range, not an object)."""
    nodes = Nodes(tmp_path, LAYOUTS["chunk files"])
    try:
        ws_b = nodes.open("b")
        write(ws_b, "kept.txt", b"b's acknowledged file")
        leftover = ws_b.chunks.put(10_000, 0, b"x" * CHUNK, "killed.txt")  # its commit never ran
        assert leftover.startswith(ws_b.chunks.prefix + "/") and ws_b.chunks.prefix.startswith(
            "writeback/shared/j-"
        )
        nodes.lapse()
        ws_b.abandon()
        nodes.open("a").close()  # a's recovery and flush
        assert leftover in nodes.shared()
        nodes.lapse()
        ws_b = nodes.open("b")
        try:
            assert leftover not in nodes.shared()
            assert _read(ws_b, "kept.txt") == b"b's acknowledged file"
        finally:
            ws_b.close()
    finally:
        nodes.close()


def test_a_power_loss_recovery_replays_no_other_journals_cover_records(tmp_path: Path) -> None:
    """After a power loss a journal replays the cover records (packs) its lost transaction
    may have held; node b's records in b's packs are b's files, never a's. Before, node a's
    recovery read every pack under the workspace and wrote b's new file into a's journal,
    naming b's chunk, which b deletes as its own garbage later."""
    nodes = Nodes(tmp_path, LAYOUTS["packs"])
    try:
        ws_a = nodes.open("a")
        nodes.lapse()
        ws_a.abandon()  # a's session never closed
        ws_b = nodes.open("b")
        write(ws_b, "b.txt", b"node b's small file")  # a covered first commit: its record is in b's pack
        nodes.lapse()
        ws_b.abandon()
        _another_boot(workspace_dir(nodes.nodes["a"][0], "shared") / "lmdb")  # a's machine lost power since
        ws_a = nodes.open("a")
        try:
            assert [name for name, _ in ws_a.listdir("")] == []
        finally:
            ws_a.close()
        nodes.lapse()
        ws_b = nodes.open("b")
        try:
            assert _read(ws_b, "b.txt") == b"node b's small file"
        finally:
            ws_b.close()
    finally:
        nodes.close()


def _make_old_layout(nodes: Nodes, name: str) -> None:
    """Turn node ``name``'s closed journal into one written before journal ids: its chunks
    moved straight under ``writeback/shared/``, its records naming them there, no id."""
    root = nodes.tmp / "shared-tier" / "writeback" / "shared"
    journal = Journal(workspace_dir(nodes.nodes[name][0], "shared") / "lmdb", "workspace 'shared'")
    try:
        with journal.write("the layout before journal ids") as txn:
            own = f"j-{txn.meta(JOURNAL_ID)}"
            for file_id, rec in list(txn.files()):
                rec["chunks"] = {
                    i: [key.replace(f"/{own}/", "/"), n] for i, (key, n) in rec["chunks"].items()
                }
                if "unverified" in rec:  # a first commit not flushed since: its chunks' lengths and CRCs
                    rec["unverified"] = {
                        key.replace(f"/{own}/", "/"): v for key, v in rec["unverified"].items()
                    }
                txn.put_file(file_id, rec)
            txn.put_meta(JOURNAL_ID, "")
            txn.del_meta("cover_seeded")  # cover22 came after journal ids
            txn.del_meta("cover_placed")  # and so did cover24
            txn.del_meta("cover_keyed")  # and wbgaps25
            txn.del_meta("cover_key")
    finally:
        journal.close()
    shutil.rmtree(root.parent.parent / "writeback-log")  # a journal from before journal ids had no shared log
    for path in sorted((root / own).rglob("*")):
        if path.is_file():
            target = root / path.relative_to(root / own)
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)


def test_chunks_from_before_journal_ids_are_read_kept_from_other_recoveries_and_collected_by_their_own(
    nodes: Nodes,
) -> None:
    """A journal written before the per-journal prefixes names chunks straight under
    ``writeback/<workspace>/``: another node's recovery leaves them (nothing tells whose they
    are), the journal that names them reads them, and they go as its garbage once replaced."""
    ws_a = nodes.open("a")
    write(ws_a, "old.txt", b"written before journal ids")
    ws_a.close()
    _make_old_layout(nodes, "a")
    old = {p for p in nodes.shared() if not p.startswith("writeback/shared/j-")}
    assert old
    nodes.lapse()
    nodes.open("b").close()
    assert old <= nodes.shared()
    nodes.lapse()
    ws_a = nodes.open("a")
    try:
        assert _read(ws_a, "old.txt") == b"written before journal ids"
        write(ws_a, "old.txt", b"rewritten under the journal's own prefix")
        ws_a.flush()
    finally:
        ws_a.close()
    assert not old & nodes.shared()  # a's own garbage, collected by a
    assert nodes.flushed("old.txt") == b"rewritten under the journal's own prefix"


def test_the_first_open_with_an_id_replays_the_cover_records_a_power_loss_left_in_old_packs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal from before ids whose machine lost power: its last session wrote cover records
    into packs straight under the workspace prefix, and its first open with an id (which stores
    the id in recovery's own transaction) replays them from there."""
    nodes = Nodes(tmp_path, LAYOUTS["packs"])
    lmdb_dir = workspace_dir(nodes.nodes["a"][0], "shared") / "lmdb"
    try:
        # the records as the code before journal ids wrote them: unseeded (cover22), unplaced (cover24)
        monkeypatch.setattr(chunks_module, "cover_seed", lambda journal: None)
        monkeypatch.setattr(chunks_module.ChunkStore, "_place", lambda self, key, length: None)
        monkeypatch.setattr(chunks_module.ChunkStore, "cover_key", UNKEYED)  # unkeyed (wbgaps25)
        ws = nodes.open("a")
        write(ws, "keep.txt", b"k" * 300)
        before = tmp_path / "journal-before"
        before.mkdir()
        ws.journal._env.copy(str(before))  # the journal on disk before the next transaction
        write(ws, "new.txt", b"n" * 3000)  # a covered first commit, acknowledged
        ws.abandon()  # the process dies with the machine
        _another_boot(lmdb_dir, before / "data.mdb")  # the power loss took "new.txt"
        _make_old_layout(nodes, "a")
        monkeypatch.undo()  # the first open with an id runs today's code
        ws = nodes.open("a")
        try:
            assert _read(ws, "new.txt") == b"n" * 3000
            assert _read(ws, "keep.txt") == b"k" * 300
        finally:
            ws.close()
        assert nodes.flushed("new.txt") == b"n" * 3000
    finally:
        nodes.close()
