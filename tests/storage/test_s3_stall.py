"""A stalled origin (accepts, reads the request, never answers) fails a read within the
overall budget ``s3.total_timeout``, whatever ``max_attempts`` and the per-attempt timeouts.

The per-attempt timeouts here are far longer than the budget and the attempts many, so a
read that ignored the budget would hold the thread well past the guard. Only "returned
before the guard" is asserted, never a duration.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from datahub.errors import TransientStorageError
from datahub.storage.s3 import S3Store
from tests.storage.conftest import make_config
from tests.storage.stallserver import StallingServer

GUARD = 60.0  # seconds: generous; attempts x timeouts below add up to 20 minutes


def stalled_store(tmp_path: Path, url: str) -> S3Store:
    config = make_config(tmp_path).s3
    config.endpoint_url, config.region = url, "us-east-1"
    config.access_key_id, config.secret_access_key = "test", "test"
    config.max_attempts, config.connect_timeout, config.read_timeout = 20, 60.0, 60.0
    config.total_timeout = 1.0
    return S3Store("stalled", "data", config)


def run_guarded(fn: Callable[[], object]) -> BaseException | None:
    """``fn``'s exception, failing the test if it is still running at the guard."""
    result: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            result.append(None)
        except BaseException as exc:  # handed back to the test
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD)
    assert not thread.is_alive(), "the read hung past the guard on a stalled origin"
    return result[0]


@pytest.mark.parametrize("how", ["read", "range", "chunks"])
def test_a_stalled_origin_fails_a_read_within_the_budget(how, tmp_path, caplog) -> None:
    with StallingServer() as server:
        store = stalled_store(tmp_path, server.url)
        calls = {
            "read": lambda: store.read("img/0001.jpg", etag="abc"),
            "range": lambda: store.read("img/0001.jpg", 4096, 8192, etag="abc"),
            "chunks": lambda: list(store.read_chunks("img/0001.jpg", 0, 1 << 20, etag="abc")),
        }
        with caplog.at_level(logging.WARNING, logger="datahub.storage.s3"):
            error = run_guarded(calls[how])
        store.close()
        assert server.accepted >= 1  # the request really reached the stalled server
    assert isinstance(error, TransientStorageError)
    assert "s3://stalled/data/img/0001.jpg" in str(error)
    assert "s3.total_timeout" in str(error)
    assert error.details["attempts"] < 20
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("s3://stalled/data/img/0001.jpg" in m and "s3.total_timeout" in m for m in logged)


def test_a_budget_of_zero_leaves_calls_unbounded(tmp_path) -> None:
    config = make_config(tmp_path).s3
    config.endpoint_url, config.region = "http://127.0.0.1:9", "us-east-1"
    config.access_key_id, config.secret_access_key = "test", "test"
    config.total_timeout = 0
    store = S3Store("b", "", config)
    assert store.retry.budget is None
    store.close()
