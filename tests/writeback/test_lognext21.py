"""lognext21: the holes nodeloss20's adoption left open (promise 3; docs/writeback.md, "A lost
node's acknowledged files").

1. An adoption without the workspace's writer lease is refused (two nodes could write it).
2. The log header's ``objects_url`` is checked against the workspace's own target: a header
   altered in the shared tier no longer points an evicted file's read at another folder.
3. ``partial``/``--partial`` adopts every whole file and lists (in the report and in the
   adoption marker) each one whose bytes cannot be proven whole; without it the refusal names
   them and the flag.

Each on a local shared tier and on S3 (moto); node a is lost as a kill -9 and a lost disk leave
it (``abandon``, its journal directory removed). The kill -9 of a running holder whose lease is
broken at once is test_lognext21_fence.py; the full device at open, test_lognext21_full.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.cli.main import main
from datahub.config import load_config
from datahub.errors import Conflict, StorageError
from datahub.storage import StoreRegistry
from datahub.workspaces import commit_workspace
from datahub.writeback import open_workspace, workspace_dir, writer_lease
from datahub.writeback.adopt import adopt_journal
from datahub.writeback.shared_log import decode, encode
from tests.writeback.conftest import CHUNK, remove_bucket
from tests.writeback.test_commit_history import read_version
from tests.writeback.test_lease import Clock
from tests.writeback.test_nodeloss20 import _Env, _files, _put

WS = "shared"
TTL = 600.0


class Pair:
    """Nodes a and b of one workspace: one shared tier (local or an S3 bucket), one flush target,
    one catalog for the writer lease (its clock the test's)."""

    def __init__(self, tmp: Path, endpoint=None) -> None:
        self.tmp, self.endpoint, self.buckets = tmp, endpoint, []
        self.clock = Clock()
        self.catalog_path = tmp / "catalog.db"
        self.leases = SQLiteCatalogStore(self.catalog_path, clock=self.clock)
        shared = (tmp / "shared-tier").as_uri()
        extra: dict = {}
        if endpoint is not None:
            self.buckets.append(endpoint.new_bucket("lognext21"))
            shared = f"s3://{self.buckets[0]}/tier"
            extra = endpoint.s3_config_overrides()
        self.overrides = {
            name: {
                **extra,
                "home": str(tmp / name),
                "objects_url": (tmp / "objects").as_uri(),
                "cache": {
                    "page_size": CHUNK,
                    "flush_interval": 3600,
                    "writeback_pack_bytes": 0,
                    "shared_url": shared,
                },
            }  # fmt: skip
            for name in ("a", "b")
        }
        self.config = {name: load_config(env={}, overrides=o) for name, o in self.overrides.items()}
        self.stores = {name: StoreRegistry(c) for name, c in self.config.items()}
        self.shared = self.stores["b"].shared_store(shared)

    def open(self, name: str, *, leased: bool = True):
        lease = self.leases if leased else None
        # a long ttl: a loaded machine (S3 on moto at load 30) starved a 30 s lease's renewals
        # past its fence once; the lease itself, not its timing, is what these tests are about
        return open_workspace(WS, self.config[name], self.stores[name], lease=lease, lease_ttl=TTL)

    def lose_a(self, writes: Callable, *, reopened: bool = False) -> str:
        """Node a (no lease: the catalog's clock is the test's) runs ``writes``, then is lost
        (``reopened``: after one more open, whose checkpoint holds what ``writes`` did)."""
        a = open_workspace(WS, self.config["a"], self.stores["a"])
        writes(a)
        if reopened:
            a.close()
            a = open_workspace(WS, self.config["a"], self.stores["a"])
        journal = a.chunks.journal
        a.abandon()
        shutil.rmtree(workspace_dir(self.config["a"], WS))
        return journal

    def log_keys(self, journal: str) -> list[str]:
        return [info.key for info in self.shared.list(f"writeback-log/{WS}/j-{journal}/")]

    def marker(self, journal: str) -> dict | None:
        key = f"writeback-log/{WS}/j-{journal}/adopted"
        return decode(self.shared.read(key)) if key in self.log_keys(journal) else None

    def close(self) -> None:
        self.leases.close()
        for stores in self.stores.values():
            stores.close()
        for bucket in self.buckets:
            remove_bucket(self.endpoint, bucket)


@pytest.fixture(params=["local", "s3"])
def pair(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Pair]:
    endpoint = request.getfixturevalue("moto_endpoint") if request.param == "s3" else None
    p = Pair(tmp_path, endpoint)
    yield p
    p.close()


# --- 1. the writer lease ----------------------------------------------------------------------------


def test_an_adoption_without_the_writer_lease_is_refused_and_nothing_is_written(pair: Pair) -> None:
    """Before: adopted, under the flock alone (the CLI opened the workspace without a lease
    whenever no catalog file existed), while nothing kept another node from writing it."""
    journal = pair.lose_a(lambda a: _put(a, "x", b"acknowledged"))
    b = pair.open("b", leased=False)
    try:
        with pytest.raises(
            Conflict, match=f"adoption of journal {journal} into workspace 'shared' refused.*catalog"
        ):
            adopt_journal(b, journal, pair.stores["b"])
        assert _files(b) == {}
    finally:
        b.close()
    assert pair.marker(journal) is None  # the lost journal's own open is not refused: nothing moved
    b = pair.open("b")
    try:
        adopt_journal(b, journal, pair.stores["b"])
        assert _files(b) == {"x": b"acknowledged"}
    finally:
        b.close()


def test_an_adoption_whose_lease_was_lost_is_refused(pair: Pair) -> None:
    """The lease lapsed and another node took it: this node must not write the workspace on."""
    journal = pair.lose_a(lambda a: _put(a, "x", b"acknowledged"))
    b = pair.open("b")
    try:
        pair.clock.now += TTL + 60
        pair.leases.acquire_lease(WS, "a third node", "host c", 30.0)
        held = writer_lease(b)
        assert held is not None and not held.renew()  # refused: another holder has it
        with pytest.raises(StorageError, match="no longer holds the writer lease"):
            adopt_journal(b, journal, pair.stores["b"])
        assert pair.marker(journal) is None
    finally:
        b.abandon()  # its close would flush: refused, the lease is another's


# --- 2. the header's objects_url -------------------------------------------------------------------


def _rewrite(pair: Pair, journal: str, change: Callable[[str, dict], dict | None]) -> None:
    """Every checkpoint object of ``journal``'s log passed through ``change`` (what whoever may
    write the shared tier could do to it)."""
    for key in pair.log_keys(journal):
        name = key.rpartition("/")[2]
        if name == "c-end" or name.startswith("c0"):
            body = decode(pair.shared.read(key))
            assert body is not None
            new = change(name, body)
            if new is not None:
                pair.shared.delete(key)
                pair.shared.put(key, encode(new))


def test_a_log_header_pointing_at_another_folder_is_refused(pair: Pair) -> None:
    """An evicted file's bytes are read from the lost journal's flush folder, which the header
    named. A header (and the file's row) rewritten to point at another folder made the adopted
    file carry that folder's bytes (before: the adoption succeeded with the other bytes)."""

    def writes(a) -> None:
        _put(a, "evicted", b"the lost node's own bytes " * 100)
        a.flush()
        assert a.flusher.evict(0) > 0

    journal = pair.lose_a(writes, reopened=True)  # the checkpoint holds the evicted file's row
    elsewhere = pair.stores["b"].store((pair.tmp / "elsewhere").as_uri())
    secret = b"another folder's bytes, not this workspace's"
    elsewhere.put("evicted", secret)
    etag = elsewhere.stat("evicted").etag

    def change(name: str, body: dict) -> dict | None:
        if name == "c-end":
            return body | {"objects_url": (pair.tmp / "elsewhere").as_uri()}
        rows = []
        for row in body["w"]:
            if row[0] == "f" and row[2] and "src" in json.loads(row[2]):
                rec = json.loads(row[2])
                rec["src"] = rec["src"] | {"path": "evicted", "etag": etag, "len": len(secret)}
                rec["size"] = len(secret)
                row = [row[0], row[1], json.dumps(rec)]
            rows.append(row)
        return body | {"w": rows}

    _rewrite(pair, journal, change)
    b = pair.open("b")
    try:
        with pytest.raises(Conflict, match="says that journal flushed to .*elsewhere.*nothing was adopted"):
            adopt_journal(b, journal, pair.stores["b"])
        assert _files(b) == {}
    finally:
        b.close()
    assert pair.marker(journal) is None


def test_a_header_naming_the_journals_own_folder_is_adopted(pair: Pair) -> None:
    """The check passes for what a node of this workspace wrote: the evicted file comes back."""

    def writes(a) -> None:
        _put(a, "evicted", b"e" * (2 * CHUNK + 3))
        a.flush()
        assert a.flusher.evict(0) > 0

    journal = pair.lose_a(writes)
    b = pair.open("b")
    try:
        adopt_journal(b, journal, pair.stores["b"])
        assert _files(b) == {"evicted": b"e" * (2 * CHUNK + 3)}
    finally:
        b.close()


# --- 3. partial adoption ---------------------------------------------------------------------------


def _two_broken(pair: Pair, catalog=None) -> tuple[str, list[str]]:
    """Node a: two whole files, two overwrites whose chunks the shared tier then loses; the
    first version of one was committed (when ``catalog``)."""
    keys: list[str] = []

    def writes(a) -> None:
        _put(a, "ok-1", b"whole")
        _put(a, "dir-ok-2", b"whole too")
        _put(a, "ckpt", b"v1, committed")
        if catalog is not None:
            commit_workspace(a, catalog, "run")
        _put(a, "ckpt", b"v2, acknowledged, its chunk lost")
        _put(a, "log", b"v1")
        _put(a, "log", b"v2, acknowledged, its chunk lost")
        for path in ("ckpt", "log"):
            keys.append(a.journal_record(path)["chunks"]["0"][0])  # an overwrite's: no CRC kept

    journal = pair.lose_a(writes)
    for key in keys:
        pair.shared.delete(key)  # the shared tier lost them behind datahub's back
    return journal, keys


def test_without_partial_the_refusal_names_every_unwhole_file_and_the_flag(pair: Pair) -> None:
    journal, keys = _two_broken(pair)
    b = pair.open("b")
    try:
        with pytest.raises(StorageError) as err:
            adopt_journal(b, journal, pair.stores["b"])
        message = str(err.value)
        assert "2 file(s)" in message and "'ckpt'" in message and "'log'" in message
        assert keys[0] in message and "--partial" in message and "nothing was adopted" in message
        assert _files(b) == {}
    finally:
        b.close()
    assert pair.marker(journal) is None


def test_partial_adopts_every_whole_file_and_keeps_the_list_of_the_others(pair: Pair) -> None:
    """Before: no way to take the whole files (every adoption refused)."""
    journal, keys = _two_broken(pair)
    b = pair.open("b")
    try:
        report = adopt_journal(b, journal, pair.stores["b"], partial=True)
        assert sorted(report.files) == ["dir-ok-2", "ok-1"]
        assert [(i["path"], keys[n] in i["why"]) for n, i in enumerate(report.not_adopted)] == [
            ("ckpt", True),
            ("log", True),
        ]
        assert _files(b) == {"ok-1": b"whole", "dir-ok-2": b"whole too"}  # never a file not whole
    finally:
        b.close()
    marker = pair.marker(journal)
    assert marker is not None and marker["done"]
    assert marker["not_adopted"] == report.not_adopted  # durable, in the shared tier
    b = pair.open("b")
    try:
        again = adopt_journal(b, journal, pair.stores["b"], partial=True)
        assert again.already and again.not_adopted == report.not_adopted  # told again
    finally:
        b.close()


def test_a_file_left_out_keeps_its_committed_version_in_the_dataset(tmp_path: Path) -> None:
    """The lost journal's merge base said 'ckpt' was its own to delete; a partial adoption
    without 'ckpt' then deleted the dataset's committed 'ckpt' at the adopter's commit (before:
    the version held 'ok-1', 'dir-ok-2' and no 'ckpt')."""
    pair = Pair(tmp_path)
    catalog = open_catalog(f"sqlite:///{pair.catalog_path}")
    try:
        journal, _ = _two_broken(pair, catalog)
        b = pair.open("b")
        try:
            adopt_journal(b, journal, pair.stores["b"], partial=True)
            head = commit_workspace(b, catalog, "run")
        finally:
            b.close()
        assert head is not None
        files = read_version(_Env(pair.stores["b"]), catalog, "run", head.seq)
        assert files == {"ok-1": b"whole", "dir-ok-2": b"whole too", "ckpt": b"v1, committed"}
    finally:
        catalog.close()
        pair.close()


def test_the_cli_refuses_without_a_catalog_and_names_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``datahub cache adopt-journal``: no catalog to hold the lease, exit 4; with it, a file
    not whole, exit 7 naming the file and --partial; with --partial, 0 and each file left out
    on a line of its own."""
    pair = Pair(tmp_path)
    try:
        journal, _ = _two_broken(pair)
        monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
        monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "b"))
        monkeypatch.setenv("DATAHUB_OBJECTS_URL", pair.config["b"].resolved_objects_url)
        monkeypatch.setenv("DATAHUB_CACHE_SHARED_URL", pair.config["b"].resolved_shared_url)
        monkeypatch.setenv("DATAHUB_CACHE_PAGE_SIZE", str(CHUNK))
        monkeypatch.setenv("DATAHUB_CATALOG_URL", f"sqlite:///{tmp_path / 'no-such-catalog.db'}")
        assert main(["cache", "adopt-journal", WS, journal]) == 4
        assert "without its writer lease" in capsys.readouterr().err
        monkeypatch.setenv("DATAHUB_CATALOG_URL", f"sqlite:///{pair.catalog_path}")
        assert main(["cache", "adopt-journal", WS, journal]) == 7
        err = capsys.readouterr().err
        assert "'ckpt'" in err and "'log'" in err and "--partial" in err
        assert main(["cache", "adopt-journal", WS, journal, "--partial"]) == 0
        out = capsys.readouterr().out
        assert "adopted journal" in out and "2 files" in out
        assert out.count("not adopted (its bytes are not whole): ") == 2 and "ckpt: chunk 0" in out
    finally:
        pair.close()
