"""A diff page starts at its cursor: its cost does not grow with the entries before it.

SQLite counts the virtual-machine steps of each page (a progress handler): a deterministic
measure of the rows visited, never a time. Before the diff had a start key, the browser's
and the API's diff pages read and dropped every entry before their cursor, so the last page
of a 10^5-entry diff cost the whole diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datahub.browser import diffs
from datahub.catalog import Put, Record, open_catalog
from tests.catalog.conftest import sqlite_steps as steps

# a local-mode app answers only requests addressed to this machine (datahub/api/local_mode.py)
LOCAL = "http://127.0.0.1"


N = 30_000


def test_a_deep_diff_page_costs_about_the_first(tmp_path: Path) -> None:
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}")
    catalog.create_dataset("d")
    keys = [f"k/{i:06d}" for i in range(N)]
    catalog.commit("d", (Put(Record(k, "memory://b/k", "e1", 1)) for k in keys))
    catalog.commit("d", (Put(Record(k, "memory://b/k", "e2", 1)) for k in keys))  # all modified

    first, (rows, cursor) = steps(catalog, lambda: diffs.page(catalog, "d", 1, 2, limit=20))
    assert [r.entry.key for r in rows] == keys[:20] and cursor == keys[19]
    deep_after = keys[N - 30]
    deep, (rows, cursor) = steps(catalog, lambda: diffs.page(catalog, "d", 1, 2, after=deep_after, limit=20))
    assert [r.entry.key for r in rows] == keys[N - 29 : N - 9] and cursor == keys[N - 10]
    assert [r.changes[0].field for r in rows] == ["etag"] * 20
    assert deep <= 3 * first + 20, (first, deep)
    # the reversed diff (newer to older) starts at its cursor too
    back, (rows, _) = steps(catalog, lambda: diffs.page(catalog, "d", 2, 1, after=deep_after, limit=20))
    assert [r.entry.key for r in rows] == keys[N - 29 : N - 9]
    assert back <= 3 * first + 20, (first, back)
    catalog.close()


def test_the_api_diff_page_starts_at_its_cursor(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from datahub.api import create_app
    from datahub.api.routes.diff import diff_listing
    from datahub.api.routes.pagination import at_version, encode_cursor
    from datahub.config import load_config

    config = load_config(env={}, overrides={"home": str(tmp_path / "var"), "api": {"local_mode": True}})
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}")
    catalog.create_dataset("d")
    keys = [f"k/{i:06d}" for i in range(N)]
    catalog.commit("d", (Put(Record(k, "memory://b/k", "e1", 1)) for k in keys))
    catalog.commit("d", (Put(Record(k, "memory://b/k", "e2", 1)) for k in keys))
    with TestClient(create_app(config, catalog=catalog), base_url=LOCAL) as client:

        def get(cursor: str) -> Any:
            answer = client.get(
                "/v1/datasets/d/diff", params={"from": 1, "to": 2, "limit": 20, "cursor": cursor}
            )
            assert answer.status_code == 200, answer.text
            return answer.json()

        get("")  # warm: the first request opens what every request shares
        first, body = steps(catalog, lambda: get(""))
        assert [e["key"] for e in body["items"]] == keys[:20]
        # the cursor the server issues: its position carries both versions (review25)
        deep_cursor = encode_cursor(
            at_version(1, at_version(2, keys[N - 30])), diff_listing("d", "1", "2", "")
        )
        deep, body = steps(catalog, lambda: get(deep_cursor))
        assert [e["key"] for e in body["items"]] == keys[N - 29 : N - 9]
        assert deep <= 3 * first + 20, (first, deep)
    catalog.close()
