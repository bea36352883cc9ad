"""review17f: attacks on journals17's ``forget-journal`` (promise 3: nothing acknowledged lost).

Each test tries one way the delete of a journal prefix could reach a LIVE journal's chunks:
an id that is a prefix of another id, ids that are paths, the row from before journal ids,
another workspace's journal id of this node, a lease taken before the first batch, and a
writer lease judged on this machine's clock instead of the catalog's (the one defect found;
fixed by the lead: the command takes the lease, so the catalog judges it, ``LeaseGuard``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.cli.journals_cmd import check_lease
from datahub.config import load_config
from datahub.console.context import CliContext
from datahub.errors import Conflict, InvalidInput
from datahub.storage.local import LocalStore
from datahub.writeback.journals import (
    JournalPrefix,
    check_journal_id,
    forget_journal,
    journal_prefix,
    journal_prefixes,
)
from tests.cli.test_journals17 import WS, Cluster, run

KEYS = {  # one chunk per journal; "" is the layout from before journal ids
    "ab": f"writeback/{WS}/j-ab/0/1.0.0011",
    "abc": f"writeback/{WS}/j-abc/0/1.0.0022",
    "ab0": f"writeback/{WS}/j-ab0/0/1.0.0033",
    "": f"writeback/{WS}/0/1.0.0044",
}


@pytest.fixture
def tier(tmp_path: Path):
    """A local shared tier holding ``KEYS``, and the config of a node that has no journal."""
    config = load_config(env={}, overrides={"home": str(tmp_path / "home")})
    store = LocalStore(tmp_path / "shared", private=True)
    for journal, key in KEYS.items():
        store.put(key, f"chunk of journal {journal!r}".encode())
    return config, store


def test_an_id_that_prefixes_other_ids_deletes_its_own_prefix_only(tier) -> None:
    config, store = tier
    entry = journal_prefix(config, store, WS, "ab")
    assert sorted(entry.sizes) == [KEYS["ab"]]  # not j-abc/ nor j-ab0/: the prefix ends with "/"
    assert forget_journal(store, entry)[0] == 1
    left = {row.journal: row.objects for row in journal_prefixes(config, store, WS)}
    assert left == {"": 1, "abc": 1, "ab0": 1}
    for journal in ("abc", "ab0", ""):
        assert store.read(KEYS[journal]) == f"chunk of journal {journal!r}".encode()


@pytest.mark.parametrize("journal", ["", "..", "ab/..", "../j-abc", "ab/", "ab\n", "AB", "j-ab", "ab*"])
def test_ids_that_are_paths_patterns_or_the_old_layout_are_refused(tier, journal: str) -> None:
    config, store = tier
    with pytest.raises(InvalidInput):
        check_journal_id(journal)
    entry = JournalPrefix(WS, journal, sizes={key: 1 for key in KEYS.values()})  # a forged listing
    with pytest.raises(InvalidInput):
        forget_journal(store, entry)
    assert {row.journal: row.objects for row in journal_prefixes(config, store, WS)} == dict.fromkeys(KEYS, 1)


def test_the_guard_runs_before_the_first_batch(tier) -> None:
    """A lease taken back between the CLI's check and the first delete stops it before any."""
    config, store = tier

    def taken_back() -> None:
        raise Conflict("the lease was taken back")

    with pytest.raises(Conflict):
        forget_journal(store, journal_prefix(config, store, WS, "abc"), before_batch=taken_back)
    assert store.read(KEYS["abc"]) == b"chunk of journal 'abc'"


def test_this_nodes_journal_id_named_under_another_workspace_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cluster = Cluster(tmp_path, monkeypatch)
    try:
        a = cluster.write_files("a")
        before = cluster.objects(a)
        for other in ("run-4", "run-420", "other"):  # a prefix of WS's name, one it prefixes, another
            code, _, err = run(capsys, "cache", "forget-journal", other, a, "--yes", "--force")
            assert code != 0 and "nothing under" in err, err
        assert cluster.objects(a) == before
    finally:
        cluster.close()


def test_forced_without_a_catalog_this_nodes_open_journal_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Embedded use: no lease anywhere, ``--force``, and a process on this node (this test)
    has the workspace open and writing; the operator's ``forget-journal`` runs in another
    process (LMDB opens a journal once per process, as beside a mount)."""
    cluster = Cluster(tmp_path, monkeypatch, catalog=False)
    try:
        a = cluster.write_files("a")
        before = cluster.objects(a)  # counted here: this process may not open the journal twice
        ws = cluster.open("a")  # open again: it holds the journal's flock now
        try:
            done = subprocess.run(
                [Path(sys.executable).parent / "datahub", "cache", "forget-journal", WS, a, "--yes", "--force"],
                capture_output=True, text=True, timeout=300,
                env={**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
            )  # fmt: skip
            assert done.returncode == 4 and "is this node's own journal" in done.stderr, done.stderr
            with ws.open("a/5.txt") as fh:
                assert fh.read(0, 100) == b"node a file 5"
        finally:
            ws.close()
        assert cluster.objects(a) == before
    finally:
        cluster.close()


def test_a_lease_another_node_holds_protects_every_journal_of_the_workspace(
    cluster_with_a_third_journal: tuple[Cluster, str], capsys: pytest.CaptureFixture
) -> None:
    """Node b holds the lease; journal c (a node that held it before b) is not b's local one:
    b may have taken c's files over (nothing here can tell), so it is refused too."""
    cluster, c = cluster_with_a_third_journal
    cluster.dies_holding_the_lease("b")
    code, _, err = run(capsys, "cache", "forget-journal", WS, c, "--yes", "--force")
    assert code == 4 and f"the writer lease of '{WS}' is held by host b pid 1" in err, err
    assert cluster.objects(c) == 1


@pytest.fixture
def cluster_with_a_third_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The two nodes of ``Cluster``, each with a journal of WS, and a third journal's prefix."""
    cluster = Cluster(tmp_path, monkeypatch)
    try:
        cluster.write_files("a")
        cluster.write_files("b")
        c = "c0ffee"
        LocalStore(tmp_path / "shared-tier", private=True).put(f"writeback/{WS}/j-{c}/0/1.0.00aa", b"c")
        yield cluster, c
    finally:
        cluster.close()


def test_a_lease_held_on_the_catalogs_clock_is_refused_whatever_this_machines_clock_says(
    tmp_path: Path,
) -> None:
    """Leases expire on the store's clock (MongoDB's server time, the API server's), which
    every node compares against (``datahub.catalog.leases``). The operator's machine runs 2
    minutes ahead of the catalog's server: node b, alive and renewing a 30 s lease, looks
    "lapsed" to ``check_lease``, which lets ``forget-journal`` delete b's live journal.
    mongomock's ``clock`` stands in for the server's clock, as the catalog tests use it."""
    url = f"mongomock://localhost/review17f-{uuid.uuid4().hex[:8]}"
    store = MongoCatalogStore(url, clock=lambda: time.time() - 120)
    try:
        store.acquire_lease(WS, "owner-of-node-b", "host b pid 1", 30)
        config = load_config(env={}, overrides={"home": str(tmp_path / "a"), "catalog_url": url})
        ctx = CliContext(config)
        ctx._services["catalog"] = Catalog(store)
        with pytest.raises(Conflict, match="held by host b pid 1"):
            check_lease(ctx, WS, "journal 00ff of workspace 'run-42'", force=False)
    finally:
        store.close()


def test_over_the_api_a_live_nodes_journal_survives_a_catalog_clock_behind_this_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """End to end, what the defect above loses: node b renews its 30 s lease in the catalog
    behind the API server, whose clock (the SQLite store's ``clock``) is 2 minutes behind
    this machine's; a global admin's ``forget-journal`` from here deletes b's journal."""
    from tests.catalog.remote import serve

    (tmp_path / "nodes").mkdir()
    cluster = Cluster(tmp_path / "nodes", monkeypatch, catalog=False)
    server, backing, admin = serve(tmp_path, {"clock": lambda: time.time() - 120})
    try:
        b = cluster.write_files("b")
        backing.store.acquire_lease(WS, "b's owner id", "host b pid 1", 30)
        before = cluster.objects(b)
        monkeypatch.setenv("DATAHUB_CATALOG_URL", server.url)
        monkeypatch.setenv("DATAHUB_API_TOKEN", admin)
        code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")
        assert cluster.objects(b) == before
        assert code == 4 and "is held by host b pid 1" in err, err
    finally:
        server.stop()
        backing.close()
        cluster.close()
