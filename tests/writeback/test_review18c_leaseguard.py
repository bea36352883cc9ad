"""review18c: ``forget-journal``'s guard when a mount of this node holds the lease (review18a).

The guard renews that lease under the mount's owner id and leaves it to the mount. If the
mount unmounts while the delete runs, its release frees the lease (owner and epoch are the
mount's), and the node being forgotten can take it before the guard's next check: it reopens
its journal while its chunks and flushed files are being deleted (the guard's promise, "the
node being retired cannot take it back meanwhile", holds only while the mount here lives).
The window is one batch of deletes and needs the retired node back at that moment."""

from __future__ import annotations

import time

import pytest

from datahub.catalog.leases import PRUNE_LAPSED
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import Conflict
from tests.cli import test_journals17
from tests.cli.test_journals17 import WS, Cluster
from tests.writeback.test_review18a_leaseguard import guard_of

cluster = test_journals17.cluster  # its fixture: nodes a and b over one catalog and shared tier


def test_the_retired_node_stays_out_when_the_mount_here_unmounts_during_the_delete(
    cluster: Cluster,
) -> None:
    """guard19 fixed it by refusing: the delete holds the lease in its own name or not at all,
    so while this node's mount holds it nothing is deleted ("unmount the workspace here"), and
    once it unmounts the guard takes the free lease under its own id, which no release of the
    mount's can free. Before, the first check renewed it under the mount's id and the mount's
    unmount let node b back in (b's open below went through)."""
    b = cluster.write_files("b")  # node b wrote and is retired
    mount = cluster.open("a")  # a mount of this node holds the lease
    guard = guard_of(cluster, b)
    try:
        guard.check()  # before the first batch
    except Conflict as refused:  # nothing deleted while this node's mount holds the lease
        assert "a mount of workspace 'run-42' on this node holds its writer lease" in str(refused)
        assert "unmount the workspace here" in str(refused) and guard.taken is None
        mount.close()  # the operator unmounts, and runs the command again
        mount = None
        guard.check()
    try:
        if mount is not None:
            mount.close()  # the mount here unmounts while the delete runs
        with pytest.raises(Conflict):  # node b, back, must wait for the delete to end
            cluster.open("b").abandon()
        guard.check()  # the next batch: still the command's
    finally:
        guard.release()
    assert cluster.catalog.lease(WS).expires <= 0  # free at the end
    cluster.open("b").abandon()


def test_a_pruned_lease_still_keeps_the_retired_node_out_during_a_forced_delete(
    cluster: Cluster,
) -> None:
    """``datahub lease prune`` deletes a free lease's row (leftovers18). ``forget-journal`` then
    finds no lease and needs ``--force``; forced, the guard took nothing, so the node being
    retired could open the workspace while its journal was being deleted (a free row is taken
    by the guard and held for the whole delete). With a catalog there, the guard takes the
    name's lease even with no row, as it takes a free one."""
    b = cluster.write_files("b")  # node b wrote, closed (its lease free) and is retired
    a_day_later = SQLiteCatalogStore(cluster.catalog.path, clock=lambda: time.time() + PRUNE_LAPSED)
    try:  # a free lease is pruned once it has been free that long (leases.freed_at)
        assert a_day_later.prune_leases()[0] == [WS]
    finally:
        a_day_later.close()
    guard = guard_of(cluster, b)
    guard.force = True  # `--force`: no lease to ask
    guard.check()  # before the first batch
    try:
        with pytest.raises(Conflict, match="open for writing elsewhere"):
            cluster.open("b").abandon()  # node b, back, waits for the delete to end
        guard.check()  # the next batch: still the command's
    finally:
        guard.release()
    assert cluster.catalog.lease(WS).expires <= 0  # free again at the end
    cluster.open("b").abandon()
