"""review18a: attacks on ``cache forget-journal``'s ``LeaseGuard`` (the lead's, seventeenth stop).

The guard takes the workspace's writer lease for the delete. When the lease's owner id is
this node's own journal's and the lease is free (this node's mount closed), the guard took
it under *that* id, at the same epoch, and released it at the end: a mount of the workspace
starting on this node meanwhile took the lease under the same id (an owner's take is always
granted), and the guard's release freed the lease under the running mount, so another node
opened the workspace beside it: two writers (promise 3; docs/writeback.md "One writer").
"""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog
from datahub.cli.journals_cmd import LeaseGuard
from datahub.console.context import CliContext
from datahub.errors import Conflict
from tests.cli import test_journals17
from tests.cli.test_journals17 import WS, Cluster

cluster = test_journals17.cluster  # its fixture: nodes a and b over one catalog and shared tier


def guard_of(nodes: Cluster, journal: str) -> LeaseGuard:
    """The guard ``forget-journal`` runs on node a (the operator's), over the shared catalog."""
    ctx = CliContext(nodes.nodes["a"][0])
    ctx._services["catalog"] = Catalog(nodes.catalog)
    return LeaseGuard(ctx, WS, f"journal {journal} of workspace {WS!r}", force=False)


def test_a_mount_starting_here_during_the_delete_is_never_left_beside_another_node(
    cluster: Cluster,
) -> None:
    b = cluster.write_files("b")  # node b wrote and is retired
    cluster.write_files("a")  # node a used the workspace since: the lease is a's, free
    assert cluster.catalog.lease(WS).expires <= 0
    guard = guard_of(cluster, b)
    guard.check()  # before the first batch
    try:  # node a's mount of the workspace starts while the delete runs
        mount = cluster.open("a")
    except Conflict:  # refused while the delete holds the lease: one writer
        mount = None
    try:
        guard.check()  # before the next batch
        guard.release()
        if mount is None:
            return
        with pytest.raises(Conflict, match="open for writing elsewhere"):
            cluster.open("b").abandon()  # a node beside the running mount
    finally:
        if mount is not None:
            mount.abandon()
