"""nodeloss18: each journal flushes under a folder of its own, ``<target>/j-<journal id>/``.

Journals are node-local: the same workspace opened on another node (a CSI pod rescheduled
while its node was down) is another journal. Both flushed to ``<target>/<path>``, so the
second overwrote the first's objects, and a file the first had evicted from the shared tier
(its bytes in that object only) was gone when its node came back (promise 3; review17c's
strict xfail, now passing in test_review17c.py). Here: the same on S3 (moto) with the
commit, an explicit target two journals share, a journal made before the change (it keeps
its objects straight under its target), and ``datahub cache forget-journal`` deleting a
retired journal's flushed files and nobody else's.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.cli.main import main
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.workspaces import commit_workspace
from datahub.writeback import workspace_dir
from datahub.writeback.journal import OBJECTS_PREFIX, Journal
from tests.writeback.conftest import CHUNK, Env, remove_bucket, write
from tests.writeback.test_commit_history import read_version

WS = "ws"


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 24)


def _keys(store, prefix: str = "") -> set[str]:
    return {info.key for info in store.list(prefix)}


def _dies_with_an_evicted_file(env: Env, path: str, data: bytes, **kwargs) -> str:
    """``path`` acknowledged, flushed and evicted on ``env``'s node (its bytes in its object
    only), then the node dies before any commit; its journal id."""
    ws = env.open(WS, **kwargs)
    write(ws, path, data)
    ws.flush()
    assert ws.flusher.evict(0) > 0
    journal = ws.chunks.journal
    ws.abandon()
    return journal


@pytest.fixture
def s3_nodes(tmp_path: Path, moto_endpoint) -> Iterator[tuple[dict[str, Env], str]]:
    """Nodes a and b (homes and shared tiers of their own) with one S3 objects store and one
    catalog, as csi/deploy/config.yaml ships them; and that bucket."""
    bucket = moto_endpoint.new_bucket("nodeloss")
    made = {}
    for node in ("a", "b"):
        overrides = {"home": str(tmp_path / node), "objects_url": f"s3://{bucket}/objects",
                     "catalog_url": f"sqlite:///{tmp_path / 'catalog.db'}",
                     "cache": {"page_size": CHUNK, "flush_interval": 3600},
                     **moto_endpoint.s3_config_overrides()}  # fmt: skip
        config = load_config(env={}, overrides=overrides)
        made[node] = Env(config, StoreRegistry(config))
    yield made, bucket
    for env in made.values():
        env.close()
    remove_bucket(moto_endpoint, bucket)


def test_on_s3_a_node_back_after_the_workspace_ran_elsewhere_commits_its_evicted_file(
    s3_nodes, tmp_path: Path
) -> None:
    """Node a's checkpoint, flushed, evicted and never committed, and node b's of the same
    path: each under its own journal's folder, both read back whole, and node a's commit
    pins node a's bytes. Before, node b's flush replaced node a's object and node a's commit
    failed with ObjectChanged (its bytes were nowhere)."""
    nodes, bucket = s3_nodes
    big = bytes(range(256)) * (3 * CHUNK // 256) + b"tail"  # several chunks: read back range by range
    a = _dies_with_an_evicted_file(nodes["a"], "ckpt", big)
    b_ws = nodes["b"].open(WS)
    write(b_ws, "ckpt", b"node b's checkpoint")
    b_ws.flush()
    b = b_ws.chunks.journal
    b_ws.close()
    a_ws = nodes["a"].open(WS)
    assert _read(a_ws, "ckpt") == big  # restored from node a's own object
    objects = nodes["a"].stores.store(f"s3://{bucket}/objects/workspaces/{WS}")
    assert _keys(objects) == {f"j-{a}/ckpt", f"j-{b}/ckpt"}
    assert a_ws.flusher.evict(0) > 0
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        commit_workspace(a_ws, catalog, "run")  # from the object again: evicted once more
        assert read_version(nodes["a"], catalog, "run", 1) == {"ckpt": big}
        a_ws.unlink("ckpt")  # the flusher deletes its own replaced object, never node b's
        a_ws.flush()
        assert _keys(objects) == {f"j-{b}/ckpt"}
        assert objects.read(f"j-{b}/ckpt") == b"node b's checkpoint"
    finally:
        catalog.close()


@pytest.fixture
def local_nodes(tmp_path: Path) -> Iterator[dict[str, Env]]:
    """Nodes a and b with one local objects store and one local shared tier, no catalog."""
    made = {}
    for node in ("a", "b"):
        overrides = {"home": str(tmp_path / node), "objects_url": (tmp_path / "objects").as_uri(),
                     "cache": {"page_size": CHUNK, "flush_interval": 3600,
                               "shared_url": (tmp_path / "shared").as_uri()}}  # fmt: skip
        config = load_config(env={}, overrides=overrides)
        made[node] = Env(config, StoreRegistry(config))
    yield made
    for env in made.values():
        env.close()


def _as_node_b(local_nodes: dict[str, Env], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI runs as node b (its home, the shared objects store and shared tier)."""
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "b"))
    monkeypatch.setenv("DATAHUB_OBJECTS_URL", local_nodes["b"].config.resolved_objects_url)
    monkeypatch.setenv("DATAHUB_CACHE_SHARED_URL", local_nodes["b"].config.resolved_shared_url)


def test_two_journals_given_one_explicit_target_write_names_of_their_own(
    local_nodes: dict[str, Env], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """An explicit ``target_url`` is the root of each journal's folder as the default one is:
    two nodes given the same target (one pod template) must not overwrite each other's files;
    ``forget-journal --target`` finds a retired journal's folder there."""
    target = (tmp_path / "outputs" / "run-42").as_uri()
    a = _dies_with_an_evicted_file(local_nodes["a"], "model.pt", b"node a's weights", target_url=target)
    b_ws = local_nodes["b"].open(WS, target_url=target)
    write(b_ws, "model.pt", b"node b's weights")
    b_ws.flush()
    b = b_ws.chunks.journal
    b_ws.close()
    a_ws = local_nodes["a"].open(WS, target_url=target)
    assert _read(a_ws, "model.pt") == b"node a's weights"
    a_ws.close()
    store = local_nodes["a"].stores.store(target)
    assert _keys(store) == {f"j-{a}/model.pt", f"j-{b}/model.pt"}
    _as_node_b(local_nodes, tmp_path, monkeypatch)
    assert main(["cache", "forget-journal", WS, a, "--yes", "--force", "--target", target]) == 0
    assert "1 flushed file," in capsys.readouterr().out
    assert _keys(store) == {f"j-{b}/model.pt"}


def made_before(env: Env, target: str) -> None:
    """Workspace ``ws`` of ``env`` as the code before nodeloss18 created it: its creation
    transaction stored the target, shared tier and chunk size, and no objects folder."""
    directory = workspace_dir(env.config, WS)
    directory.mkdir(parents=True)
    journal = Journal(directory / "lmdb", f"workspace {WS!r}")
    try:
        with journal.write("creation as before nodeloss18") as txn:
            txn.put_meta("target_url", target)
            txn.put_meta("shared_url", env.config.resolved_shared_url)
            txn.put_meta("chunk_size", str(CHUNK))
    finally:
        journal.close()


def test_a_journal_made_before_keeps_flushing_evicting_and_restoring_straight_under_its_target(
    local_nodes: dict[str, Env], tmp_path: Path
) -> None:
    """Its flushed and evicted files are at ``<target>/<path>``: it must keep reading them
    there, flushing there (its origin state names those objects) and deleting its replaced
    objects there, and its target must stay what it was."""
    env = local_nodes["a"]
    target = f"{env.config.resolved_objects_url}/workspaces/{WS}"
    made_before(env, target)
    big = b"before" * CHUNK
    ws = env.open(WS)
    write(ws, "big.bin", big)
    write(ws, "gone.txt", b"renamed next")
    ws.flush()
    assert ws.flusher.evict(0) > 0
    ws.close()
    store = env.stores.store(target)
    assert _keys(store) == {"big.bin", "gone.txt"}

    ws = env.open(WS)
    with ws.journal.read() as txn:
        assert (txn.meta("target_url"), txn.meta(OBJECTS_PREFIX)) == (target, None)
    assert _read(ws, "big.bin") == big  # restored from <target>/big.bin
    ws.rename("gone.txt", "kept.txt")
    ws.flush()
    assert _keys(store) == {"big.bin", "kept.txt"}  # the replaced object deleted, where it was
    assert store.read("kept.txt") == b"renamed next"
    ws.close()


def test_forget_journal_deletes_the_retired_journals_flushed_files_and_no_one_elses(
    local_nodes: dict[str, Env], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Node a flushed files and died; node b runs the workspace now, and an object from before
    journal folders lies straight under the target. ``forget-journal`` of node a's journal
    (from node b, ``--force``: no catalog holds a lease here) shows node a's flushed files in
    its plan and deletes them with node a's shared-tier prefix; node b's files and the old
    object stay. Before, it left node a's flushed files for ever (nothing named them)."""
    a_ws = local_nodes["a"].open(WS)
    a_ws.mkdir("out")
    for i in range(3):
        write(a_ws, f"out/{i}.txt", f"node a's file {i}".encode())
    a_ws.flush()
    a = a_ws.chunks.journal
    a_ws.abandon()
    b_ws = local_nodes["b"].open(WS)
    b_ws.mkdir("out")
    write(b_ws, "out/0.txt", b"node b's file")
    b_ws.flush()
    b = b_ws.chunks.journal
    b_ws.close()
    target = local_nodes["b"].stores.store(f"{local_nodes['b'].config.resolved_objects_url}/workspaces/{WS}")
    target.put("legacy.txt", io.BytesIO(b"flushed before journal folders"), 30)
    assert _keys(target) == {*(f"j-{a}/out/{i}.txt" for i in range(3)), f"j-{b}/out/0.txt", "legacy.txt"}

    _as_node_b(local_nodes, tmp_path, monkeypatch)
    assert main(["cache", "forget-journal", WS, a, "--force"]) == 2  # the plan, nothing deleted
    out = capsys.readouterr().out
    assert "its flushed files: 3 objects" in out and "  out/2.txt" in out
    assert len(_keys(target)) == 5
    assert main(["cache", "forget-journal", WS, a, "--yes", "--force"]) == 0
    assert "3 flushed files" in capsys.readouterr().out
    assert _keys(target) == {f"j-{b}/out/0.txt", "legacy.txt"}
    assert not (tmp_path / "objects" / "workspaces" / WS / f"j-{a}").exists()  # no empty folders left
    shared = local_nodes["b"].stores.store(local_nodes["b"].config.resolved_shared_url)
    assert not _keys(shared, f"writeback/{WS}/j-{a}/") and _keys(shared, f"writeback/{WS}/j-{b}/")
    b_ws = local_nodes["b"].open(WS)
    assert _read(b_ws, "out/0.txt") == b"node b's file"
    b_ws.close()
