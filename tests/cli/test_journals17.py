"""journals17: ``datahub cache journals`` and ``datahub cache forget-journal`` on two nodes.

Nodes a and b (two homes) share one catalog (the writer lease) and one local shared tier;
node b wrote small files to workspace ``run-42`` and died without flushing them. From node a
an operator lists the journal prefixes and forgets b's, and each guard refuses what could
lose an acknowledged file by accident (promise 3): a's own journal, b's lease still held, no
lease to ask, no ``--yes``. docs/cli.md's "Journal prefixes in the shared tier" block runs
here as written (its journal id swapped for b's).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.cli.main import main
from datahub.config import load_config
from datahub.errors import Conflict
from datahub.storage import StoreRegistry
from datahub.words import counted
from datahub.writeback import open_workspace, workspace_dir
from datahub.writeback.journals import forget_journal, journal_prefix
from tests.writeback.conftest import CHUNK, write
from tests.writeback.test_journals17 import Interrupted, interrupt_at, write_files

REPO = Path(__file__).resolve().parents[2]
WS = "run-42"
DOC_ID = "0123456789abcdef"
FILES = 12


class Cluster:
    """Two homes over one shared tier, and (``catalog``) one catalog file for their leases."""

    def __init__(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, catalog: bool = True, packs: bool = True
    ) -> None:
        self.tmp, self.shared_url = tmp_path, (tmp_path / "shared-tier").as_uri()
        self.catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}" if catalog else ""
        self.catalog = SQLiteCatalogStore(tmp_path / "catalog.db") if catalog else None
        self.nodes = {}
        for name in ("a", "b"):
            overrides = {"home": str(tmp_path / name), "catalog_url": self.catalog_url,
                         "cache": {"page_size": CHUNK, "flush_interval": 3600, "shared_url": self.shared_url,
                                   **({} if packs else {"writeback_pack_bytes": 0})}}  # fmt: skip
            config = load_config(env={}, overrides=overrides)
            self.nodes[name] = (config, StoreRegistry(config))
        monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "a"))  # the operator works on node a
        monkeypatch.setenv("DATAHUB_CACHE_SHARED_URL", self.shared_url)
        if catalog:
            monkeypatch.setenv("DATAHUB_CATALOG_URL", self.catalog_url)

    def open(self, name: str):
        config, stores = self.nodes[name]
        return open_workspace(WS, config, stores, background=False, lease=self.catalog)

    def write_files(self, name: str) -> str:
        """Small files and a big one acknowledged on node ``name``, never flushed; its journal id."""
        return write_files(self.open(name), name, FILES)

    def dies_holding_the_lease(self, name: str) -> None:
        """Node ``name``'s lease as a node that died while writing leaves it: held for an hour."""
        owner = (workspace_dir(self.nodes[name][0], WS) / "lease-owner").read_text().strip()
        self.catalog.acquire_lease(WS, owner, f"host {name} pid 1", 3600)

    def objects(self, journal: str) -> int:
        config, stores = self.nodes["a"]
        return journal_prefix(config, stores.shared_store(self.shared_url), WS, journal).objects

    def close(self) -> None:
        if self.catalog is not None:
            self.catalog.close()
        for _config, stores in self.nodes.values():
            stores.close()


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    c = Cluster(tmp_path, monkeypatch)
    yield c
    c.close()


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def docs_block() -> list[str]:
    """The command lines of the bash block under docs/cli.md's "Journal prefixes" heading."""
    text = (REPO / "docs" / "cli.md").read_text()
    section = text.split("## Journal prefixes in the shared tier", 1)[1].split("\n## ", 1)[0]
    body = re.search(r"```bash\n(.*?)```", section, re.S)
    assert body, "docs/cli.md's Journal prefixes section shows no bash block"
    return [line for line in body.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_the_docs_block_forgets_a_dead_nodes_journal_after_breaking_its_lease(
    cluster: Cluster, capsys: pytest.CaptureFixture
) -> None:
    a, b = cluster.write_files("a"), cluster.write_files("b")
    cluster.dies_holding_the_lease("b")
    lines = docs_block()
    assert [[w for w in shlex.split(line)[1:] if w != "--json"][:2] for line in lines] == [
        ["cache", "journals"],
        ["lease", "show"],
        ["lease", "break"],
        ["cache", "forget-journal"],
        ["cache", "journals"],
    ]
    outputs = []
    for line in lines:
        argv = shlex.split(line.replace(DOC_ID, b))
        assert argv[0] == "datahub", line
        code, out, err = run(capsys, *argv[1:])
        assert code == 0, (line, err)
        outputs.append(out)
    listed = outputs[0]
    assert re.search(rf"^{WS}\s+{a}\s.*\syes\s", listed, re.M) and re.search(rf"^{WS}\s+{b}\s", listed, re.M)
    assert f"deleted journal {b} of workspace '{WS}'" in outputs[3]
    rows = json.loads(outputs[4])
    assert [row["journal"] for row in rows if not row["forgotten"]] == [a]
    # b flushed nothing under the default target: only its marker stays (blobcas19), so a run
    # with the target b really flushed to can still delete its flushed files
    assert [(row["journal"], row["objects"]) for row in rows if row["forgotten"]] == [(b, 0)]
    assert cluster.objects(b) == 0 and cluster.objects(a) > 0


def test_the_plan_names_the_files_its_cover_records_hold_and_nothing_goes_without_yes(
    cluster: Cluster, capsys: pytest.CaptureFixture
) -> None:
    cluster.write_files("a")
    b = cluster.write_files("b")  # its lease released: free
    before = cluster.objects(b)
    code, out, err = run(capsys, "cache", "forget-journal", WS, b)
    assert code == 2 and "nothing deleted: add --yes" in err
    assert counted(before, "object") in out and f"its cover records name {FILES} small files" in out
    assert "  b/0.txt" in out and "  b/11.txt" in out and "a/0.txt" not in out
    assert "big.bin" not in out  # three chunks: a big file's first commit carries no cover record
    assert cluster.objects(b) == before
    code, out, _ = run(capsys, "--json", "cache", "forget-journal", WS, b)
    plan = json.loads(out)
    assert code == 2 and plan["objects"] == before and len(plan["cover_paths"]) == plan["covers"] == FILES


def test_this_nodes_own_journal_is_refused(cluster: Cluster, capsys: pytest.CaptureFixture) -> None:
    a = cluster.write_files("a")
    before = cluster.objects(a)
    code, _, err = run(capsys, "cache", "forget-journal", WS, a, "--yes", "--force")
    assert code == 4 and f"journal {a} of workspace '{WS}' is this node's own journal" in err
    assert cluster.objects(a) == before


def test_a_lease_another_node_holds_is_refused_and_so_is_one_this_nodes_mount_holds_until_it_unmounts(
    cluster: Cluster, capsys: pytest.CaptureFixture
) -> None:
    """A lease this node's mount holds was let through before guard19 (renewed under the
    mount's id), and the mount's unmount mid-delete let the node being retired back in
    (tests/writeback/test_review18c_leaseguard.py): now refused, naming the unmount, while
    the mount reads and writes on; once it unmounts, the delete holds the lease itself."""
    cluster.write_files("a")
    b = cluster.write_files("b")
    cluster.dies_holding_the_lease("b")
    before = cluster.objects(b)
    code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--force")
    assert code == 4 and f"the writer lease of '{WS}' is held by host b pid 1" in err
    assert "datahub lease show run-42" in err and cluster.objects(b) == before
    cluster.catalog.break_lease(WS, "", at_once=False)  # broken, not yet lapsed: still refused
    code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")
    assert code == 4 and "is broken by host b pid 1" in err and cluster.objects(b) == before
    cluster.catalog.break_lease(WS, "", at_once=True)
    ws = cluster.open("a")  # node a writes the workspace now
    try:  # another process, as beside a mount (LMDB opens a journal once per process)
        done = subprocess.run(
            [Path(sys.executable).parent / "datahub", "cache", "forget-journal", WS, b, "--yes"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 4, done.stderr
        assert f"a mount of workspace '{WS}' on this node holds its writer lease" in done.stderr
        assert "unmount the workspace here" in done.stderr
        with ws.open("a/5.txt") as fh:  # the mount goes on, its lease untouched
            assert fh.read(0, 100) == b"node a file 5"
        write(ws, "a/after.txt", b"written after the refusal")
    finally:
        ws.close()
    assert cluster.objects(b) == before  # nothing went while the mount ran
    code, out, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")  # unmounted: goes
    assert code == 0, err
    assert f"deleted journal {b} of workspace '{WS}': {counted(before, 'object')}" in out
    assert cluster.objects(b) == 0 and cluster.catalog.lease(WS).expires <= 0


def test_without_a_catalog_it_is_refused_unless_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cluster = Cluster(tmp_path, monkeypatch, catalog=False)
    try:
        cluster.write_files("a")
        b = cluster.write_files("b")
        before = cluster.objects(b)
        code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")
        assert code == 4 and f"no writer lease of '{WS}'" in err and "--force" in err
        assert cluster.objects(b) == before and not (tmp_path / "a" / "catalog.db").exists()
        code, out, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--force")
        assert code == 0, err
        assert cluster.objects(b) == 0
    finally:
        cluster.close()


def test_a_partial_delete_is_finished_by_a_second_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cluster = Cluster(tmp_path, monkeypatch, packs=False)  # one object per small file: many to delete
    try:
        _partial_then_finished(cluster, capsys)
    finally:
        cluster.close()


def _partial_then_finished(cluster: Cluster, capsys: pytest.CaptureFixture) -> None:
    cluster.write_files("a")
    b = cluster.write_files("b")
    config, stores = cluster.nodes["a"]
    store = stores.shared_store(cluster.shared_url)
    entry = journal_prefix(config, store, WS, b)
    with pytest.raises(Interrupted):
        forget_journal(store, entry, interrupt_at(2))
    left = cluster.objects(b)
    assert 0 < left < entry.objects
    code, out, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")
    assert code == 0, err
    assert counted(left, "object") in out and cluster.objects(b) == 0
    code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")
    assert code == 3 and "already forgotten, or a wrong id" in err


def test_bad_names_and_ids_exit_2(cluster: Cluster, capsys: pytest.CaptureFixture) -> None:
    for args in ((WS, "../etc"), ("../x", DOC_ID), (WS, "j-" + DOC_ID)):
        code, _, err = run(capsys, "cache", "forget-journal", *args, "--yes")
        assert code == 2, (args, err)
    code, _, err = run(capsys, "cache", "journals", "--workspace", "a/b")
    assert code == 2, err


def test_the_node_being_retired_cannot_take_its_lease_back_mid_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node being retired restarts while its prefix is deleted and tries to take its lease
    back: refused, since the delete holds the lease (review17f: it takes it, so the catalog
    judges it on its own clock); the delete finishes, and the lease is free after it."""
    cluster = Cluster(tmp_path, monkeypatch, packs=False)  # one object per small file: two batches
    try:
        _taken_back_mid_delete(cluster)
    finally:
        cluster.close()


def _taken_back_mid_delete(cluster: Cluster) -> None:
    from datahub.cli.journals_cmd import LeaseGuard
    from datahub.console.context import CliContext

    b = cluster.write_files("b")  # its lease released: free
    config, stores = cluster.nodes["a"]
    store = stores.shared_store(cluster.shared_url)
    cluster.write_files("a")
    entry = journal_prefix(config, store, WS, b)
    ctx = CliContext(config, creates_catalog=False)
    guard = LeaseGuard(ctx, WS, "b's journal", force=False)
    taken: list[int] = []
    refused: list[Conflict] = []

    def restarts_after_three(size: int) -> None:
        taken.append(size)
        if len(taken) == 3:
            with pytest.raises(Conflict, match="open for writing elsewhere") as exc:
                cluster.dies_holding_the_lease("b")
            refused.append(exc.value)

    try:
        guard.check()
        forget_journal(store, entry, restarts_after_three, guard.check)
    finally:
        guard.release()
        ctx.close()
    assert refused and cluster.objects(b) == 0 and len(taken) == entry.objects
    assert cluster.catalog.lease(WS).expires <= 0  # released: b may take it now
    cluster.dies_holding_the_lease("b")


def test_over_the_api_a_lease_the_token_may_not_see_is_refused_even_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The server answers "no lease" for one this token may not see: a token with no role on
    the commit target must not read that as "no lease to ask" and --force a live node's prefix."""
    from datahub.api.tokens import issue_token
    from tests.catalog.remote import serve

    (tmp_path / "nodes").mkdir()
    cluster = Cluster(tmp_path / "nodes", monkeypatch, catalog=False)  # b wrote under the flock only
    server, backing, admin = serve(tmp_path)
    try:
        b = cluster.write_files("b")
        backing.create_dataset("pets", owner="root")
        backing.store.acquire_lease(WS, "b's owner id", "host b pid 1", 3600, "pets")
        before = cluster.objects(b)
        monkeypatch.setenv("DATAHUB_CATALOG_URL", server.url)
        monkeypatch.setenv("DATAHUB_API_TOKEN", issue_token(backing.store, "bob")[0])
        code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--force")
        assert code == 4 and "shows this token no writer lease" in err and cluster.objects(b) == before
        monkeypatch.setenv("DATAHUB_API_TOKEN", admin)
        code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--force")
        assert code == 4 and "is held by host b pid 1" in err and cluster.objects(b) == before
        backing.store.break_lease(WS, "", at_once=True)
        code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")
        assert code == 0, err
        assert cluster.objects(b) == 0
    finally:
        server.stop()
        backing.close()
        cluster.close()
