"""Adoption of a lost node's journal on the other shared tiers (nodeloss20): RADOS, where a new
small file's cover record is its chunk object's xattr, and S3 (moto), where it is the chunk
PUT's user metadata (ceph41; before, every first commit there was a logged transaction). Node a is abandoned (what
a kill -9 leaves: its deferred commits gone from memory), its journal directory removed; node
b adopts everything it acknowledged, byte for byte. tests/writeback/test_nodeloss20.py is the
local tier, with a real kill -9 and the lease."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.writeback import default_target, workspace_dir
from datahub.writeback.adopt import adopt_journal
from tests.writeback.conftest import CHUNK, Env, make_env
from tests.writeback.test_nodeloss20 import _files


@pytest.fixture(params=["s3", pytest.param("rados", marks=pytest.mark.ceph)])
def two_nodes(tmp_path: Path, request: pytest.FixtureRequest, monkeypatch) -> Iterator[tuple[Env, Env, str]]:
    if request.param == "rados":
        ceph = request.getfixturevalue("ceph_cluster")
        monkeypatch.syspath_prepend(ceph.vars["CEPH_PYLIB"])  # Debian's python3-rados
        monkeypatch.setenv("CEPH_CONF", ceph.vars["CEPH_CONF"])
        shared = f"rados://{ceph.vars['CEPH_POOL']}/wb-{uuid.uuid4().hex[:12]}"
        a = make_env(tmp_path / "a", shared_url=shared)
        b = make_env(tmp_path / "b", shared_url=shared)
    else:
        endpoint = request.getfixturevalue("moto_endpoint")
        a = make_env(tmp_path / "a", endpoint, shared_s3=True)
        b = make_env(tmp_path / "b", endpoint, shared_url=a.config.cache.shared_url)
    yield a, b, request.param
    if request.param == "rados":
        store = a.stores.store(a.config.resolved_shared_url)
        for info in list(store.list()):
            store.delete(info.key)
    b.close()
    a.close()


def test_a_lost_nodes_files_are_adopted_on_every_tier(two_nodes) -> None:
    a_env, b_env, _tier = two_nodes
    a = a_env.open()
    expected = {}

    def put(path: str, data: bytes) -> None:
        with a.open(path, create=True, truncate=True) as fh:
            fh.write(0, data)
        expected[path] = data

    put("over", b"first")
    put("over", b"second, acknowledged")
    put("big", bytes(range(256)) * (3 * CHUNK // 256) + b"tail")
    put("tmp", b"renamed")
    a.rename("tmp", "kept")
    expected["kept"] = expected.pop("tmp")
    put("gone", b"unlinked")
    a.unlink("gone")
    del expected["gone"]
    a.journal.defer_seconds = 3600.0  # only their cover records (an xattr, S3 metadata) name them
    # the earlier small files' commits written now: a batch of them due meanwhile swept late-1
    # into LMDB (a race under load, on RADOS before as on S3 now)
    a.journal.settle_deferred()
    put("late-1", b"small, closed last")
    put("late-2", b"small, closed very last")
    assert a.journal.deferred() == 2
    a_journal = a.chunks.journal
    a.abandon()
    shutil.rmtree(workspace_dir(a_env.config, "ws"))
    leases = SQLiteCatalogStore(a_env.config.resolved_journal_dir.parent / "catalog.db")
    try:
        # node b is configured as a node of the same workspace: the same flush target (the log's
        # folder for a's journal is checked against it) and the writer lease (lognext21)
        b = b_env.open(lease=leases, target_url=default_target(a_env.config, "ws"))
        report = adopt_journal(b, a_journal, b_env.stores)
        assert report.covers == 2 and not report.dropped
        assert _files(b) == expected
        b.close()
    finally:
        leases.close()
