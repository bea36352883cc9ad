"""Which failures say "the origin stalled" (``details["timed_out"]``), on both GET paths (the
lean urllib3 GET and boto3's): a stall is a timeout; a refused connection is not, although
urllib3 2.x makes its NewConnectionError a subclass of ConnectTimeoutError. The cache
remembers only timeouts (docs/cache.md "Remembered failures"), so a refused connection
called a timeout kept a recovered origin's files failing (issue 23)."""

from __future__ import annotations

import pytest

from datahub.errors import TransientStorageError
from datahub.storage.s3 import S3Store
from tests.storage.conftest import make_config
from tests.storage.stallserver import StallingServer


def store_at(tmp_path, url: str, lean: bool) -> S3Store:
    config = make_config(tmp_path).s3
    config.endpoint_url, config.region = url, "us-east-1"
    config.access_key_id, config.secret_access_key = "test", "test"
    # a stall ends at the read timeout: 1 s is one as well as 5 s (the connect timeout stays long:
    # a refused connection must fail at once, not time out)
    config.max_attempts, config.connect_timeout, config.read_timeout = 2, 5.0, 1.0
    config.total_timeout = 1.0
    return S3Store("b", "", config, lean_get=lean)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "boto3"])
def test_a_refused_connection_is_a_fast_failure_not_a_timeout(tmp_path, lean: bool) -> None:
    with StallingServer() as server:
        url = server.url  # nothing listens there once the block is left
    with pytest.raises(TransientStorageError) as refused:
        store_at(tmp_path, url, lean).read("img/a.jpg", etag="abc")
    assert not refused.value.details.get("timed_out"), refused.value


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "boto3"])
def test_a_stalled_origin_is_a_timeout(tmp_path, lean: bool) -> None:
    with StallingServer() as server, pytest.raises(TransientStorageError) as stalled:
        store_at(tmp_path, server.url, lean).read("img/a.jpg", etag="abc")
    assert stalled.value.details.get("timed_out"), stalled.value
