"""The multi-host cluster for tests/multihost: storage, service and two compute nodes.

- storage (10.213.0.10): moto in server mode, bucket ``data`` (the origin the datasets
  point at; moto's request log is the origin GET count), and a tiny Ceph (one mon, one
  memstore OSD, started by scripts/ceph-dev/ceph-up.sh inside this namespace with
  ``CEPH_ADDR`` = its address, so it is reachable only over the test network) whose pool
  ``cache`` is the compute nodes' shared tier (``cache.shared_url = rados://cache/pool``).
  The nodes hold only a ``client.datahub`` key limited to that pool.
- service (10.213.0.20): ``datahub serve --auth`` over a SQLite catalog only it opens.
- a (10.213.0.31) and b (10.213.0.32): each its own home (RAM + disk cache) and its own
  ``datahub mount`` daemon, with ``catalog_url = http://10.213.0.20:8080`` and a token.

The builder is tests/multihost/cluster.py (bench/soak builds the same hosts).
Skipped with the reason when ``ip netns`` cannot be used (not root, no iproute2).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.multihost.cluster import (  # noqa: F401 - the tests import these names from here
    API_PORT,
    ORIGIN_BUCKET,
    Cluster,
    Node,
    build_cluster,
)
from tests.multihost.netns import netns_refusal


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if item.get_closest_marker("netns") is None:
            continue
        item.add_marker(pytest.mark.ceph)  # the storage host runs a Ceph (the shared tier)
        if reason is None:
            reason = netns_refusal() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"netns: {reason}"))


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for both modules here (bringing one up costs ~15 s); torn down after the package."""
    with build_cluster(tmp_path_factory.mktemp("multihost")) as c:
        yield c
