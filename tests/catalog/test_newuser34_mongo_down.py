"""What newuser34 read from ``datahub --catalog mongodb://host:port/db dataset list`` with no
MongoDB there: one CLI error line holding pymongo's whole topology description (the configured
timeouts twice, ``<TopologyDescription id: …, servers: [<ServerDescription …>]>``). It now says
the host's own error and what to check."""

from __future__ import annotations

import pymongo.errors
import pytest

from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.errors import TransientStorageError

SAID = (  # pymongo 4's message for a refused connection, as the CLI printed it
    "127.0.0.1:1: [Errno 111] Connection refused (configured timeouts: socketTimeoutMS: 20000.0ms, "
    "connectTimeoutMS: 20000.0ms), Timeout: 10.0s, Topology Description: <TopologyDescription id: "
    "6b11a534ac531f9d0592c6e3, topology_type: Unknown, servers: [<ServerDescription ('127.0.0.1', 1) "
    "server_type: Unknown, rtt: None, error=AutoReconnect('127.0.0.1:1: [Errno 111] Connection refused "
    "(configured timeouts: socketTimeoutMS: 20000.0ms, connectTimeoutMS: 20000.0ms)')>]>"
)


@pytest.mark.parametrize(
    "error", [pymongo.errors.ServerSelectionTimeoutError(SAID), pymongo.errors.AutoReconnect(SAID)]
)
def test_an_unreachable_mongodb_is_one_line_naming_the_hosts_error(error: Exception) -> None:
    with pytest.raises(TransientStorageError) as caught, MongoCatalogStore._translate("open catalog x"):
        raise error
    assert caught.value.message == (
        "open catalog x: MongoDB unreachable (127.0.0.1:1: [Errno 111] Connection refused); check that "
        "the server the catalog URL names (--catalog, catalog_url) runs and is reachable from here, or "
        "retry later"
    )
