"""Shared fixtures: real S3 servers (moto, Ceph RGW) and a clean datahub Config per test.

Per-component fixtures live in the component's own ``tests/<component>/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.config import Config, load_config
from tests.servers import CephCluster, MotoServer, S3Endpoint


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[S3Endpoint]:
    server = MotoServer()
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def ceph_cluster() -> Iterator[CephCluster]:
    cluster = CephCluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def ceph_endpoint(ceph_cluster: CephCluster) -> S3Endpoint:
    return ceph_cluster.endpoint


@pytest.fixture(params=["moto", pytest.param("ceph", marks=pytest.mark.ceph)])
def s3_endpoint(request: pytest.FixtureRequest) -> S3Endpoint:
    """Runs a test once against moto and once against the real Ceph RGW."""
    return request.getfixturevalue(f"{request.param}_endpoint")


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """An embedded-default Config rooted in a fresh temp dir (no env or file leaks in)."""
    return load_config(env={}, overrides={"home": str(tmp_path / "var")})
