"""journals17: the shared tier's journal prefixes, listed and forgotten (``datahub.writeback.journals``).

Two nodes (two homes) share one shared tier, as csi/deploy/config.yaml ships them; each
journal writes under ``writeback/<workspace>/j-<id>/``. The listing must say what each holds
and which is this node's; forgetting one must delete that prefix whole and nothing else (the
other node's files still read back), and a delete cut short is finished by running it again.
Local tier in both layouts (packs carry cover records), and a RADOS pool (cover records in
xattrs) from the session's Ceph.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from datahub.config import load_config
from datahub.errors import InvalidInput
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
from datahub.writeback.chunks import ChunkStore
from datahub.writeback.journals import (
    check_journal_id,
    cover_records,
    forget_journal,
    journal_prefix,
    journal_prefixes,
)
from tests.writeback.conftest import CHUNK, LAYOUTS, write

FILES = 20  # per node: more than one batch of deletes (DELETERS)


def write_files(ws, name: str, files: int = FILES) -> str:
    """``files`` small files and a big one acknowledged in ``ws`` (directory ``name``), never
    flushed: the node dies (``abandon``). Its journal id."""
    ws.mkdir(name)
    for i in range(files):
        write(ws, f"{name}/{i}.txt", f"node {name} file {i}".encode())
    write(ws, f"{name}/big.bin", b"x" * (3 * CHUNK))
    journal = ws.chunks.journal
    ws.abandon()
    return journal


class Interrupted(Exception):
    """What a Ctrl-C in the middle of a long delete does to it: it stops there."""


def interrupt_at(n: int) -> Callable[[int], None]:
    """An ``on_deleted`` for ``forget_journal`` that stops the delete at its ``n``-th object."""
    done: list[int] = []

    def on_deleted(size: int) -> None:
        done.append(size)
        if len(done) == n:
            raise Interrupted

    return on_deleted


class Nodes:
    """Homes a and b with one shared tier (no catalog: the lease is the CLI's concern)."""

    def __init__(self, tmp_path: Path, shared_url: str, layout: dict, extra: dict | None = None) -> None:
        self.packed = shared_url.startswith("file:") and "writeback_pack_bytes" not in layout
        self.nodes = {}
        for name in ("a", "b"):
            config = load_config(
                env={},
                overrides={"home": str(tmp_path / name), "objects_url": (tmp_path / "objects").as_uri(),
                           "cache": {"page_size": CHUNK, "flush_interval": 3600, **layout,
                                     "shared_url": shared_url}, **(extra or {})},
            )  # fmt: skip
            self.nodes[name] = (config, StoreRegistry(config))

    def config(self, name: str):
        return self.nodes[name][0]

    def shared(self):
        config, stores = self.nodes["a"]
        return stores.shared_store(config.resolved_shared_url)

    def write_files(self, name: str, workspace: str = "shared") -> str:
        """``FILES`` small files and a big one acknowledged on node ``name``, never flushed (the
        node dies); its journal id."""
        config, stores = self.nodes[name]
        return write_files(open_workspace(workspace, config, stores, background=False), name)

    def read(self, name: str, path: str, workspace: str = "shared") -> bytes:
        config, stores = self.nodes[name]
        ws = open_workspace(workspace, config, stores, background=False)
        try:
            with ws.open(path) as fh:
                return fh.read(0, 1 << 20)
        finally:
            ws.abandon()

    def close(self) -> None:
        for _config, stores in self.nodes.values():
            stores.close()


@pytest.fixture(params=list(LAYOUTS))
def nodes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Nodes]:
    n = Nodes(tmp_path, (tmp_path / "shared-tier").as_uri(), LAYOUTS[request.param])
    yield n
    n.close()


def _listed(store, prefix: str) -> dict[str, int]:
    return {info.key: info.size for info in store.list(prefix)}


def test_the_listing_shows_each_journal_of_each_workspace_and_which_is_this_nodes(nodes: Nodes) -> None:
    a, b = nodes.write_files("a"), nodes.write_files("b")
    other = nodes.write_files("b", workspace="other")
    store = nodes.shared()
    rows = {(e.workspace, e.journal): e for e in journal_prefixes(nodes.config("a"), store)}
    assert set(rows) == {("shared", a), ("shared", b), ("other", other)}
    for (workspace, journal), entry in rows.items():
        objects = _listed(store, f"writeback/{workspace}/j-{journal}/")
        assert (entry.objects, entry.bytes) == (len(objects), sum(objects.values()))
        assert entry.bytes >= FILES * len("node a file 0") + 3 * CHUNK
        assert entry.newest > 0
    assert rows[("shared", a)].this_node and not rows[("shared", b)].this_node
    assert not rows[("other", other)].this_node  # a has no journal of "other"
    if nodes.packed:  # a cover record per new small file in its pack, naming its path
        assert rows[("shared", b)].covers >= FILES
        names = {r["path"] for r in cover_records(store, rows[("shared", b)])}
        assert {f"b/{i}.txt" for i in range(FILES)} <= names and not any(n.startswith("a/") for n in names)
    else:  # chunk files on a local tier carry no cover records
        assert {e.covers for e in rows.values()} == {0}
    only = journal_prefixes(nodes.config("b"), store, "shared")
    assert {(e.journal, e.this_node) for e in only} == {(a, False), (b, True)}


def test_forgetting_a_journal_deletes_its_prefix_whole_and_leaves_the_other_nodes_files(nodes: Nodes) -> None:
    a, b = nodes.write_files("a"), nodes.write_files("b")
    store = nodes.shared()
    kept = _listed(store, f"writeback/shared/j-{a}/")
    entry = journal_prefix(nodes.config("a"), store, "shared", b)
    assert entry.objects == len(_listed(store, f"writeback/shared/j-{b}/")) > 0
    objects, nbytes = forget_journal(store, entry)
    assert (objects, nbytes) == (entry.objects, entry.bytes)
    assert _listed(store, f"writeback/shared/j-{b}/") == {}
    assert not (Path(store.root) / f"writeback/shared/j-{b}").exists()  # no empty directories left
    assert _listed(store, f"writeback/shared/j-{a}/") == kept
    assert nodes.read("a", "a/3.txt") == b"node a file 3"
    assert nodes.read("a", "a/big.bin") == b"x" * (3 * CHUNK)
    assert journal_prefix(nodes.config("a"), store, "shared", b).objects == 0


def test_a_delete_cut_short_is_finished_by_running_it_again(tmp_path: Path) -> None:
    nodes = Nodes(tmp_path, (tmp_path / "shared-tier").as_uri(), LAYOUTS["chunk files"])
    try:
        nodes.write_files("a")
        b = nodes.write_files("b")
        store = nodes.shared()
        entry = journal_prefix(nodes.config("a"), store, "shared", b)
        assert entry.objects > FILES  # one object per small file, three for the big one
        with pytest.raises(Interrupted):
            forget_journal(store, entry, interrupt_at(3))
        left = journal_prefix(nodes.config("a"), store, "shared", b)
        assert 0 < left.objects < entry.objects  # stopped part-way, within a batch
        assert forget_journal(store, left) == (left.objects, left.bytes)
        assert _listed(store, f"writeback/shared/j-{b}/") == {}
    finally:
        nodes.close()


def test_only_journal_ids_can_be_forgotten() -> None:
    assert check_journal_id("0123456789abcdef") == "0123456789abcdef"
    for bad in ("", "../a", "ABC", "j-0123", "0123/4"):
        with pytest.raises(InvalidInput, match="not a journal id"):
            check_journal_id(bad)


def test_on_s3_the_listing_and_a_forget_go_by_prefix(tmp_path: Path, s3_endpoint) -> None:
    """An S3/RGW shared tier: listed by prefix, each small file's chunk carries its cover
    record (in its PUT's metadata, ceph41), and forgetting one journal deletes its objects only."""
    bucket = s3_endpoint.new_bucket("journals17")
    nodes = Nodes(tmp_path, f"s3://{bucket}/tier", {}, s3_endpoint.s3_config_overrides())
    store = nodes.shared()
    try:
        a, b = nodes.write_files("a"), nodes.write_files("b")
        rows = {e.journal: e for e in journal_prefixes(nodes.config("a"), store)}
        assert set(rows) == {a, b} and rows[a].this_node and not rows[b].this_node
        assert rows[b].objects == FILES + 3 and {e.covers for e in rows.values()} == {FILES}
        assert forget_journal(store, rows[b]) == (rows[b].objects, rows[b].bytes)
        assert [e.journal for e in journal_prefixes(nodes.config("a"), store)] == [a]
        assert nodes.read("a", "a/big.bin") == b"x" * (3 * CHUNK)
    finally:
        for info in list(store.list()):
            store.delete(info.key)
        nodes.close()


@pytest.mark.ceph
def test_on_rados_the_listing_counts_the_cover_xattrs_and_a_forget_deletes_one_journal(
    tmp_path: Path, ceph_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])  # Debian's python3-rados
    monkeypatch.setenv("CEPH_CONF", ceph_cluster.vars["CEPH_CONF"])
    url = f"rados://{ceph_cluster.vars['CEPH_POOL']}/wb-{uuid.uuid4().hex[:12]}"
    nodes = Nodes(tmp_path, url, {})
    store = nodes.shared()
    try:
        a, b = nodes.write_files("a"), nodes.write_files("b")
        rows = {e.journal: e for e in journal_prefixes(nodes.config("b"), store, "shared")}
        assert set(rows) == {a, b} and rows[b].this_node and not rows[a].this_node
        assert rows[a].covers >= FILES  # every new small file's first commit: an xattr on its chunk
        names = {r["path"] for r in cover_records(store, rows[a])}
        assert {f"a/{i}.txt" for i in range(FILES)} <= names and not any(n.startswith("b/") for n in names)
        assert forget_journal(store, rows[a]) == (rows[a].objects, rows[a].bytes)
        assert [e.journal for e in journal_prefixes(nodes.config("b"), store, "shared")] == [b]
        assert nodes.read("b", "b/7.txt") == b"node b file 7"
    finally:
        for info in list(store.list()):
            store.delete(info.key)
        nodes.close()


def test_keys_from_before_journal_ids_are_a_row_of_their_own(nodes: Nodes) -> None:
    """A journal from before ids wrote straight under the workspace prefix: one row, journal "",
    counted apart from the journals' prefixes."""
    b = nodes.write_files("b")
    store = nodes.shared()
    old = ChunkStore(store, "writeback/shared", "workspace 'shared'", 0, journal="")
    key = old.put(7, 0, b"a chunk from before journal ids", "old.txt")
    assert key.startswith("writeback/shared/") and "/j-" not in key
    rows = {e.journal: e for e in journal_prefixes(nodes.config("a"), store)}
    assert set(rows) == {"", b}
    assert (rows[""].objects, rows[""].bytes) == (1, len(b"a chunk from before journal ids"))
    assert rows[""].prefix == "writeback/shared/" and not rows[""].this_node
    assert rows[b].objects == len(_listed(store, f"writeback/shared/j-{b}/"))
