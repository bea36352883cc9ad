"""leasepage17: the writer lease list is paged and bounded (review17d).

Lease rows are never deleted and any token may add some (a made-up workspace bound to a
dataset it may create), so one ``list_leases`` call, one ``GET /v1/remote/leases`` and the
rows one request reads are bounded: the stores answer a range of names (``after``, ``limit``),
only those the caller may see (leasefilter18), the route answers ``next``, and ``datahub
lease list`` reads page after page until the end.
"""

from __future__ import annotations

import json
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.catalog import CatalogStore
from datahub.catalog.http_store import HttpCatalogStore
from datahub.catalog.leases import LIST_PAGE
from datahub.errors import InvalidInput
from tests.api.conftest import Api
from tests.catalog.conftest import make_store
from tests.catalog.remote import serve

STORES = pytest.mark.parametrize("kind", ["sqlite", "mongomock"])


def _take(store: CatalogStore, name: str, holder: str = "host n pid 7 [root]", dataset: str = "") -> None:
    store.acquire_lease(name, uuid.uuid4().hex, holder, 600, dataset)


@STORES
def test_a_store_lists_a_range_of_names_in_order(kind: str, tmp_path: Path) -> None:
    with closing(make_store(kind, tmp_path)) as store:
        _lists_a_range(store)


def _lists_a_range(store: CatalogStore) -> None:
    for name in ("ws-e", "ws-b", "ws-d", "ws-a", "ws-c"):
        _take(store, name)
    names = lambda after, limit: [lease.name for lease in store.list_leases(after, limit)]  # noqa: E731
    assert names("", 2) == ["ws-a", "ws-b"]
    assert names("ws-b", 2) == ["ws-c", "ws-d"]
    assert names("ws-d", 2) == ["ws-e"]  # short: the end
    assert names("ws-e", 2) == []
    assert names("ws-bb", 10) == ["ws-c", "ws-d", "ws-e"]  # after a name no lease has
    assert [lease.name for lease in store.list_leases()] == ["ws-a", "ws-b", "ws-c", "ws-d", "ws-e"]
    assert store.list_leases("", 1) == [store.lease("ws-a")]  # every field, as ``lease`` reads it


@STORES
@pytest.mark.parametrize("limit", [0, -1, LIST_PAGE + 1])
def test_a_store_refuses_a_page_that_would_not_bound_the_read(kind: str, tmp_path: Path, limit: int) -> None:
    """SQLite's ``LIMIT -1`` and MongoDB's ``limit(0)`` read the whole table."""
    with closing(make_store(kind, tmp_path)) as store:
        _take(store, "ws-a")
        with pytest.raises(InvalidInput, match="1 to 1000"):
            store.list_leases("", limit)


def _page(api: Api, who: str, **params: object) -> tuple[list[str], str | None]:
    r = api.get("/v1/remote/leases", who, params=params)
    assert r.status_code == 200, r.text
    return [row["name"] for row in r.json()["leases"]], r.json()["next"]


def test_the_route_pages_by_name_and_says_where_to_go_on(api: Api) -> None:
    for name in ("ws-a", "ws-b", "ws-c", "ws-d", "ws-e"):
        _take(api.catalog.store, name, dataset="pets")
    assert _page(api, "admin", limit=2) == (["ws-a", "ws-b"], "ws-b")
    assert _page(api, "admin", limit=2, after="ws-b") == (["ws-c", "ws-d"], "ws-d")
    assert _page(api, "admin", limit=2, after="ws-d") == (["ws-e"], None)
    assert _page(api, "bob", limit=3, after="ws-a") == (["ws-b", "ws-c", "ws-d"], "ws-d")  # pets' writer
    assert _page(api, "admin") == (["ws-a", "ws-b", "ws-c", "ws-d", "ws-e"], None)  # default: 1,000
    for bad in (0, LIST_PAGE + 1):
        assert api.get("/v1/remote/leases", "admin", params={"limit": bad}).status_code in (400, 422)


def test_a_caller_who_sees_none_of_the_leases_before_its_own_gets_its_own_and_no_hidden_name(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eve (no role on pets) sees none of the 8 leases bound to pets that come first by name:
    the store hands the route only her own lease (bound to a dataset not created yet), so her
    first page is it and the end. This test asserted the leak before (leasefilter18): the route
    read a window of 8 rows, showed none, and answered the last hidden name as ``next``."""
    hidden = [f"ws-{i:02d}" for i in range(8)]
    for name in hidden:
        _take(api.catalog.store, name, dataset="pets")
    _take(api.catalog.store, "ws-zz", "host e pid 7 [eve]", "eves-results")
    real, read = api.catalog.store.list_leases, []

    def counted(*args: object, **kwargs: object) -> list:
        rows = real(*args, **kwargs)
        read.extend(rows)
        return rows

    monkeypatch.setattr(api.catalog.store, "list_leases", counted)
    assert _page(api, "eve", limit=2) == (["ws-zz"], None)
    assert [lease.name for lease in read] == ["ws-zz"]  # the store answered no hidden lease
    assert _page(api, "eve", limit=1) == (["ws-zz"], "ws-zz")
    assert _page(api, "eve", limit=1, after="ws-zz") == ([], None)
    assert _page(api, "alice", limit=2) == ([], None)  # pets' reader: not its writer


def test_over_a_real_server_the_store_and_the_cli_list_every_lease_page_by_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """More leases than one page: the HTTP store follows the server's ``next`` across scan
    windows bob sees nothing in, and ``datahub lease list --json`` prints every row, as one
    list, for an admin; bob's only his."""
    from datahub.cli.main import main

    server, backing, admin = serve(tmp_path)
    bob = issue_token(backing.store, "bob")[0]
    backing.create_dataset("pets", owner="root", acl={"bob": "writer"})
    names = [f"made-up-{i:04d}" for i in range(LIST_PAGE + 1)]
    try:
        for name in names:
            _take(backing.store, name, "host e pid 7 [eve]", f"target-{name}")
        _take(backing.store, "zz-train", "host b pid 8 [bob]", "pets")
        http = HttpCatalogStore(server.url, token=bob)
        try:
            assert [lease.name for lease in http.list_leases("", 1)] == ["zz-train"]
        finally:
            http.close()
        monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "client"))
        monkeypatch.setenv("DATAHUB_API_TOKEN", admin)
        assert main(["--catalog", server.url, "--json", "lease", "list"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert [row["name"] for row in rows] == [*names, "zz-train"]
        monkeypatch.setenv("DATAHUB_API_TOKEN", bob)
        assert main(["--catalog", server.url, "--json", "lease", "list"]) == 0
        assert [row["name"] for row in json.loads(capsys.readouterr().out)] == ["zz-train"]
    finally:
        server.stop()
        backing.close()
