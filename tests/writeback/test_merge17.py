"""merge17: a workspace commit applies the workspace's own changes to the head, three-way.

Before, ``commit_workspace`` took the workspace for the dataset's whole tree and deleted
every head file the workspace lacked: a CSI workspace rescheduled to another node (whose
journal is node-local, so the workspace there starts empty) dropped from the head everything
the first node had committed, and a first commit into a dataset made by an import replaced
it whole. Now a head file the workspace lacks goes only if this journal committed that very
record (docs/writeback.md, "A commit applies the workspace's changes"). Real stores
throughout: local object stores, an SQLite catalog file, real journals, a real kill -9.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog, Patch, Put, Record, open_catalog
from datahub.config import load_config
from datahub.errors import CatalogUnavailable
from datahub.storage import StoreRegistry
from datahub.workspaces import commit_workspace, finish_workspace
from datahub.writeback import Workspace
from tests.catalog.conftest import STORES, make_store
from tests.writeback.conftest import CHUNK, Env, write

DATASET = "run"


def _overrides(tmp_path: Path, node: str) -> dict:
    """A node of its own (home, journal) sharing the objects store and catalog with the others."""
    return {
        "home": str(tmp_path / node),
        "objects_url": (tmp_path / "objects").as_uri(),
        "catalog_url": f"sqlite:///{tmp_path / 'catalog.db'}",
        "cache": {"page_size": CHUNK, "flush_interval": 3600},
    }


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, Env]]:
    made = {}
    for node in ("node-a", "node-b"):
        config = load_config(env={}, overrides=_overrides(tmp_path, node))
        made[node] = Env(config, StoreRegistry(config))
    yield made
    for env in made.values():
        env.close()


@pytest.fixture
def catalog(tmp_path: Path):
    cat = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    yield cat
    cat.close()


def _head(catalog) -> dict[str, str]:
    """key -> the checksum of each file of the dataset's head."""
    return {r.key: r.checksum for r in catalog.list_records(DATASET)}


def _sha(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def _import(env: Env, catalog, files: dict[str, bytes]) -> None:
    """Another writer's version (what ``datahub commit`` of uploaded objects makes)."""
    store = env.stores.store(env.config.resolved_objects_url)
    puts = []
    for key, data in files.items():
        info = store.put(f"imported/{key}", io.BytesIO(data), len(data))
        url = store.url_for(f"imported/{key}")
        puts.append(Put(Record(key, url, info.etag, len(data), checksum=_sha(data))))
    if not any(d.name == DATASET for d in catalog.list_datasets()):
        catalog.create_dataset(DATASET)
    catalog.commit(DATASET, puts, message="import")


def _committed(env: Env, catalog, files: dict[str, bytes]) -> Workspace:
    """Workspace "ws" of ``env`` holding ``files``, committed once to the dataset."""
    ws = env.open()
    for key, data in files.items():
        write(ws, key, data)
    commit_workspace(ws, catalog, DATASET)
    return ws


def test_a_workspace_rescheduled_to_another_node_keeps_what_the_first_node_committed(nodes, catalog) -> None:
    """The CSI inline volume's pod moved: node B opens the workspace with an empty journal.
    Its commits add its files; node A's stay in the head (at the first commit, and at every
    later one: B's second commit must not take A's files for its own)."""
    a = nodes["node-a"].open()
    a.mkdir("ckpt")
    write(a, "ckpt/epoch-1", b"from node a")
    write(a, "log-a.txt", b"a's log")
    commit_workspace(a, catalog, DATASET)
    a.close()

    b = nodes["node-b"].open()
    b.mkdir("ckpt")
    write(b, "ckpt/epoch-2", b"from node b")
    v2 = commit_workspace(b, catalog, DATASET)
    assert (v2.added, v2.removed) == (1, 0)
    assert sorted(_head(catalog)) == ["ckpt/epoch-1", "ckpt/epoch-2", "log-a.txt"]

    write(b, "ckpt/epoch-3", b"from node b, later")
    v3 = commit_workspace(b, catalog, DATASET)
    assert (v3.added, v3.removed) == (1, 0)
    assert sorted(_head(catalog)) == ["ckpt/epoch-1", "ckpt/epoch-2", "ckpt/epoch-3", "log-a.txt"]


def test_a_first_commit_into_an_imported_dataset_keeps_its_files(nodes, catalog) -> None:
    env = nodes["node-a"]
    _import(env, catalog, {"train/0.bin": b"zero", "train/1.bin": b"one"})
    ws = env.open()
    write(ws, "model.pt", b"weights")
    v2 = commit_workspace(ws, catalog, DATASET)
    assert (v2.seq, v2.added, v2.removed) == (2, 1, 0)
    assert sorted(_head(catalog)) == ["model.pt", "train/0.bin", "train/1.bin"]
    write(ws, "model.pt", b"better weights")
    v3 = commit_workspace(ws, catalog, DATASET)
    assert (v3.added, v3.removed, v3.modified) == (0, 0, 1)
    assert _head(catalog) == {
        "model.pt": _sha(b"better weights"),
        "train/0.bin": _sha(b"zero"),
        "train/1.bin": _sha(b"one"),
    }


def test_a_file_the_workspace_deleted_is_deleted_even_after_others_committed(nodes, catalog) -> None:
    env = nodes["node-a"]
    ws = _committed(env, catalog, {name: name.encode() * 3 for name in ("a", "b", "c")})
    ws.unlink("a")
    v2 = commit_workspace(ws, catalog, DATASET)  # the head is the base: as before
    assert (v2.removed, sorted(_head(catalog))) == (1, ["b", "c"])

    _import(env, catalog, {"x": b"someone else's"})  # the head moves past the workspace's commit
    ws.unlink("b")
    ws.rename("c", "d")
    commit_workspace(ws, catalog, DATASET)
    assert sorted(_head(catalog)) == ["d", "x"]
    assert commit_workspace(ws, catalog, DATASET).seq == 4  # nothing changed: the head as it is


def test_a_deleted_file_someone_changed_since_is_kept(nodes, catalog) -> None:
    env = nodes["node-a"]
    files = {"shared.cfg": b"the workspace's", "labeled": b"labeled", "other": b"other"}
    ws = _committed(env, catalog, files)
    _import(env, catalog, {"shared.cfg": b"a user's edit"})
    catalog.commit(DATASET, [Patch("labeled", labels={"keep": True})], message="a user's label")
    for key in files:
        ws.unlink(key)
    commit_workspace(ws, catalog, DATASET)
    assert _head(catalog) == {"shared.cfg": _sha(b"a user's edit"), "labeled": _sha(b"labeled")}


def test_a_commit_the_catalog_refused_leaves_the_deletes_for_the_next(nodes, catalog, monkeypatch) -> None:
    """The catalog fails the commit (down) after the journal stored the union of the records:
    nothing is lost for the next commit, which deletes what the workspace removed before."""
    env = nodes["node-a"]
    ws = _committed(env, catalog, {"gone": b"gone", "kept": b"kept"})
    ws.unlink("gone")
    write(ws, "new", b"new")

    def down(*args, **kwargs):
        raise CatalogUnavailable("the catalog is down (injected)")

    with monkeypatch.context() as patched:
        patched.setattr(Catalog, "commit", down)
        with pytest.raises(CatalogUnavailable):
            commit_workspace(ws, catalog, DATASET)
    assert sorted(_head(catalog)) == ["gone", "kept"]
    version = commit_workspace(ws, catalog, DATASET)
    assert (version.seq, version.added, version.removed) == (2, 1, 1)
    assert sorted(_head(catalog)) == ["kept", "new"]


_CRASHING_COMMIT = """
import json, os, signal, sys
from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
import datahub.workspaces as workspaces

config = load_config(env={}, overrides=json.loads(sys.argv[1]))
with StoreRegistry(config) as stores:
    ws = open_workspace("ws", config, stores, background=False)
    with ws.open("new-in-lost-commit", create=True, truncate=True) as fh:
        fh.write(0, b"committed, then the process died")
    ws.unlink("gone")
    def die(self, wanted):  # the catalog commit returned; the journal never hears of it
        os.kill(os.getpid(), signal.SIGKILL)
    workspaces._Base.settle = die
    workspaces.commit_workspace(ws, open_catalog(config.resolved_catalog_url), "run")
"""


def test_a_kill_between_the_catalog_commit_and_the_journal_record_loses_no_delete(
    nodes, catalog, tmp_path: Path
) -> None:
    """kill -9 after the catalog committed and before the journal recorded what: the next
    commit still deletes what the workspace removed since, whichever commit put it, and still
    keeps a file someone else changed."""
    env = nodes["node-a"]
    _committed(env, catalog, {name: name.encode() for name in ("gone", "kept", "theirs-later")}).close()

    run = subprocess.run(
        [sys.executable, "-c", _CRASHING_COMMIT, json.dumps(_overrides(tmp_path, "node-a"))],
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
    assert sorted(_head(catalog)) == ["kept", "new-in-lost-commit", "theirs-later"]  # it landed

    _import(env, catalog, {"theirs-later": b"changed by a user"})
    ws = env.open()  # recovery after the kill
    ws.unlink("new-in-lost-commit")
    ws.unlink("theirs-later")
    commit_workspace(ws, catalog, DATASET)
    assert _head(catalog) == {"kept": _sha(b"kept"), "theirs-later": _sha(b"changed by a user")}


def test_finish_workspace_after_a_dead_daemon_merges_too(nodes, catalog) -> None:
    """The CSI plugin's last flush and commit of a workspace whose mount process died: the
    same journal, so the same base."""
    env = nodes["node-a"]
    ws = _committed(env, catalog, {"a": b"a", "b": b"b"})
    _import(env, catalog, {"x": b"imported"})
    ws.unlink("a")
    write(ws, "c", b"c")
    ws.abandon()  # the daemon died before its own commit
    version = finish_workspace("ws", env.config, DATASET)
    assert version is not None and version.seq == 3
    assert sorted(_head(catalog)) == ["b", "c", "x"]


@pytest.mark.parametrize("kind", STORES)
def test_the_merge_holds_on_every_catalog_store(nodes, kind: str, tmp_path: Path) -> None:
    """The records a store hands back must still be the ones the journal recorded (URL, etag,
    size, checksum, no metadata): else a workspace's own delete is silently never made. On
    SQLite, MongoDB and the API server: the rescheduled node, an import, a delete."""
    store = make_store(kind, tmp_path / "catalog")
    catalog = Catalog(store)
    try:
        a = nodes["node-a"].open()
        write(a, "a", b"from node a")
        write(a, "gone", b"deleted later by node a")
        commit_workspace(a, catalog, DATASET)
        a.close()
        b = nodes["node-b"].open()
        write(b, "b", b"from node b")
        commit_workspace(b, catalog, DATASET)
        b.close()
        _import(nodes["node-a"], catalog, {"x": b"imported"})
        a = nodes["node-a"].open()
        a.unlink("gone")
        version = commit_workspace(a, catalog, DATASET)
        assert (version.seq, version.added, version.removed) == (4, 0, 1)
        assert sorted(_head(catalog)) == ["a", "b", "x"]
    finally:
        if kind == "mongo":
            store.drop()  # type: ignore[attr-defined]
        catalog.close()
