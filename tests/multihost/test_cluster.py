"""Datahub across hosts on a real (namespaced) network: storage, service, two compute nodes.

See tests/multihost/conftest.py for the cluster and docs/architecture.md ("Testing across
hosts") for how to run it. Every wait here is a hang guard, never a timing goal.
"""

from __future__ import annotations

import random
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.fuse.conftest import read_tree
from tests.multihost.cluster import upload
from tests.multihost.conftest import API_PORT, ORIGIN_BUCKET, Cluster
from tests.multihost.netns import wait_until

pytestmark = [pytest.mark.netns, pytest.mark.fuse]

PAGE = 4 * 1024**2


def objects(seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    out = {f"train/img_{i:02d}.bin": rng.randbytes(rng.randint(1, 200_000)) for i in range(12)}
    out["big/blob.bin"] = rng.randbytes(PAGE + 12_345)  # two pages
    return out


def only_version(mnt: Path, dataset: str) -> Path:
    """The first version of ``dataset`` under a mount (``<mnt>/<dataset>/v1``)."""
    return mnt / dataset / "v1"


def test_cold_read_on_b_of_what_a_warmed_makes_no_origin_get(cluster: Cluster) -> None:
    objs = objects(1)
    upload(cluster, "warm", objs)
    cluster.a.cli("import", f"s3://{ORIGIN_BUCKET}/warm", "--to", "warm")
    pages = sum(-(-len(d) // PAGE) for d in objs.values())

    with cluster.a.mounted(cluster.root / "mnt-a-warm", "warm") as _:
        tree = read_tree(only_version(cluster.root / "mnt-a-warm", "warm"))
        assert tree == objs
        # A's origin fills go to the shared tier in the background; wait until all are there.
        wait_until(lambda: cluster.shared_pages() >= pages, 60, f"{pages} pages in the shared tier")
    assert cluster.origin_gets() > 0  # the count does see A's origin reads

    before, rados_before = cluster.origin_gets(), cluster.rados_reads()
    with cluster.b.mounted(cluster.root / "mnt-b-warm", "warm"):
        assert read_tree(only_version(cluster.root / "mnt-b-warm", "warm")) == objs
    assert cluster.origin_gets() == before, "node B read from the origin what node A had warmed"
    # ... it read them from RADOS: the storage host's OSD served at least one read per page
    assert cluster.rados_reads() - rados_before >= pages


def test_the_rados_tier_listens_only_on_the_storage_hosts_test_address(cluster: Cluster) -> None:
    """The Ceph the nodes share is bound to 10.213.0.10 in the storage namespace, nowhere else."""
    out = cluster.storage.run(["ss", "-ltnpH"]).stdout
    ceph = [line.split() for line in out.splitlines() if '"ceph-' in line]
    daemons = {re.search(r'"(ceph-[a-z]+)"', parts[-1]).group(1) for parts in ceph}
    assert daemons == {"ceph-mon", "ceph-osd"}, out
    assert all(parts[3].rsplit(":", 1)[0] == cluster.storage.addr for parts in ceph), out


def test_workspace_committed_on_a_reads_byte_identical_on_b(cluster: Cluster) -> None:
    objs = objects(2)
    ws = cluster.root / "mnt-a-ws"
    with cluster.a.mounted(ws, "--workspace", "ws1", "--commit-to", "fromws"):
        for key, data in objs.items():
            (ws / key).parent.mkdir(parents=True, exist_ok=True)
            (ws / key).write_bytes(data)
    # unmounting committed the workspace as a new version of "fromws" through the service
    mnt = cluster.root / "mnt-b-ws"
    with cluster.b.mounted(mnt, "fromws"):
        assert read_tree(only_version(mnt, "fromws")) == objs


def test_a_workspace_held_on_a_is_refused_on_b_through_the_remote_catalog(cluster: Cluster) -> None:
    """Two machines, one ``datahub serve`` catalog (and one RADOS shared tier, where both would
    keep the workspace's chunks under one prefix): the second ``mount --workspace`` of a name
    fails (exit 4, Conflict) naming the first holder and its principal; once a unmounted
    (releasing the lease), b mounts it."""
    ws_a, ws_b = cluster.root / "mnt-a-lease", cluster.root / "mnt-b-lease"
    with cluster.a.mounted(ws_a, "--workspace", "leased"):
        (ws_a / "out.txt").write_bytes(b"written on a")
        with (
            pytest.raises(AssertionError, match="exited 4"),
            cluster.b.mounted(ws_b, "--workspace", "leased"),
        ):
            pass
    log = (cluster.b.root / "mount-mnt-b-lease.log").read_text()
    assert re.search(r"workspace 'leased' is open for writing elsewhere: host \S+ pid \d+ \[", log), log
    with cluster.b.mounted(ws_b, "--workspace", "leased"):  # a released it when it unmounted
        (ws_b / "out.txt").write_bytes(b"written on b")


def cat(path: Path, guard: float = 120.0) -> subprocess.CompletedProcess:
    """Read ``path`` in a separate process, killed after ``guard`` seconds (a hang guard only)."""
    return subprocess.run(
        ["timeout", "-s", "KILL", str(guard), "cat", str(path)], capture_output=True, timeout=guard + 30
    )


def test_service_restart_during_an_epoch_on_b(cluster: Cluster) -> None:
    objs = objects(3)
    upload(cluster, "epoch", objs)
    cluster.a.cli("import", f"s3://{ORIGIN_BUCKET}/epoch", "--to", "epoch")
    mnt = cluster.root / "mnt-b-epoch"
    with cluster.b.mounted(mnt, "epoch"):
        version = only_version(mnt, "epoch")
        assert read_tree(version) == objs  # epoch 1 warms B's cache
        cluster.kill_service()
        try:
            assert read_tree(version) == objs  # epoch 2 goes on without the service
            down = cluster.b.cli("log", "epoch", check=False)
            assert down.returncode != 0
            assert f"{cluster.service.addr}:{API_PORT}" in down.stderr  # names the URL ...
            assert cluster.token not in down.stderr + down.stdout  # ... never the token
        finally:
            cluster.start_service()
        assert read_tree(version) == objs
        assert "import s3://data/epoch" in cluster.b.cli("log", "epoch").stdout  # the catalog answers again

        # A reboot: the service host drops off the network, its server dies and comes back;
        # a catalog call B made meanwhile retries and succeeds once the host is reachable.
        cluster.service.link(up=False)
        try:
            cluster.kill_service()
            cluster.start_service()  # listening, but not reachable yet
            log = open(cluster.root / "b-log-during-reboot.out", "w+b")  # noqa: SIM115
            call = cluster.b.popen_cli("log", "epoch", log=log)
            time.sleep(1.0)  # let the call start while the host is away (not a timing assertion)
        finally:
            cluster.service.link(up=True)
        assert call.wait(120) == 0, log.name
        log.seek(0)
        assert b"import s3://data/epoch" in log.read()
        log.close()
        assert read_tree(version) == objs


def test_a_cut_off_node_reads_cached_data_and_fails_uncached_reads_with_eio(cluster: Cluster) -> None:
    objs = objects(4)
    upload(cluster, "cut", objs)
    cluster.a.cli("import", f"s3://{ORIGIN_BUCKET}/cut", "--to", "cut")
    keys = sorted(objs)
    cached, uncached = keys[: len(keys) // 2], keys[len(keys) // 2 :]
    mnt = cluster.root / "mnt-b-cut"
    # --no-prefetch: the background warm-up (on by default) would cache the "uncached" half
    with cluster.b.mounted(mnt, "cut", "--no-prefetch"):
        version = only_version(mnt, "cut")
        for key in cached:
            assert (version / key).read_bytes() == objs[key]
        cluster.b.host.link(up=False)
        try:
            for key in cached:
                assert (version / key).read_bytes() == objs[key]
            res = cat(version / uncached[0])
            assert res.returncode == 1, res  # cat's own failure, not the hang guard's SIGKILL
            assert b"Input/output error" in res.stderr
        finally:
            cluster.b.host.link(up=True)
