"""review35: a remote commit the server takes longer to answer than the client's read timeout.

Every server here is real, on 127.0.0.1 (``datahub serve`` over SQLite)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from datahub.catalog import Catalog, Put
from datahub.catalog.http_store import HttpCatalogStore
from tests.catalog.conftest import rec
from tests.catalog.remote import serve
from tests.catalog.test_http_store import FAST


def test_a_commit_the_server_takes_longer_than_the_read_timeout_to_answer_is_its_version(
    tmp_path: Path,
) -> None:
    """A commit answers only once it is done (a large change set, a queue of commits ahead of
    it at the server). The client's per-read timeout (30 s by default, 1 s here) must not cut
    it: every retry of the same commit id then waits on the first attempt's turn and times out
    too, and the caller got catalog_unavailable for a version the server made (and, with no
    commit id of its own, would commit the same changes again as a second version)."""

    server, backing, token = serve(tmp_path)
    commit = backing.store.commit

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(2.5)  # more than the client's read timeout below
        return commit(*args, **kwargs)

    backing.store.commit = slow  # type: ignore[method-assign]
    options = FAST | {"timeout": 1.0, "budget": 6.0}
    store = HttpCatalogStore(f"http://127.0.0.1:{server.port}", token=token, **options)
    try:
        cat = Catalog(store)
        cat.create_dataset("ds")
        v1 = cat.commit("ds", [Put(rec("a"))])
        assert v1.seq == 1 and [v.seq for v in backing.log("ds")] == [1]
    finally:
        store.close(), server.stop(), backing.close()
