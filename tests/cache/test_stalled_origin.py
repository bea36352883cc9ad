"""A cold read through the cache from an origin that accepts connections and never answers
fails with TransientStorageError naming the object, within ``s3.total_timeout``, and caches
nothing. The per-attempt timeouts are far longer than the budget; only "returned before
the guard" is asserted, never a duration."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.config import load_config
from datahub.errors import TransientStorageError
from datahub.storage import StoreRegistry
from tests.cache.conftest import put_objects, with_cache
from tests.storage.stallserver import StallingServer
from tests.storage.test_s3_stall import run_guarded


@pytest.fixture
def s3_config(tmp_path: Path, moto_endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    return with_cache(config, page_size=1024, ram_bytes=1 << 20, disk_bytes=1 << 20)


def test_a_cold_read_from_a_stalled_origin_fails_within_the_budget(s3_config, moto_endpoint) -> None:
    bucket = moto_endpoint.new_bucket("stalled")
    with StoreRegistry(s3_config) as registry:
        [(ref, _)] = put_objects(registry.store(f"s3://{bucket}/data"), [3000])
    with StallingServer() as server:
        s3 = s3_config.s3.model_copy(
            update={
                "endpoint_url": server.url,
                "max_attempts": 20,
                "connect_timeout": 60.0,
                "read_timeout": 60.0,
                "total_timeout": 1.0,
            }
        )
        config = s3_config.model_copy(update={"s3": s3})
        with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
            error = run_guarded(lambda: cache.read(ref))
            assert isinstance(error, TransientStorageError), error
            assert ref.url.split("://", 1)[1].split("/", 1)[0] in str(error)
            assert "s3.total_timeout" in str(error)
            assert all(t.usage().entries == 0 for t in cache.tiers)
            asked = server.accepted
            assert asked >= 1
            # Asked again at once (as the kernel re-asks a failed readahead): the timeout is
            # given back without waiting a second budget on the stalled origin.
            again = run_guarded(lambda: cache.read(ref))
            assert isinstance(again, TransientStorageError) and "not asked again" in str(again)
            assert server.accepted == asked
