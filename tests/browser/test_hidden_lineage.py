"""A version made from a dataset the caller may not read: the browser's pages never name it.

alice owns ``pets``; ``made`` is derived from ``pets@v1`` and eve may read ``made`` only. The
API already answers eve's versions of ``made`` with the source hidden
(``datahub.api.lineage``); the dataset page, the version page and the diff page answer the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import Env, browser_app, pets_env
from tests.browser.test_access import signed_in, token

PAGES = ("/datasets/made", "/datasets/made/versions/1", "/datasets/made/diff?from=0&to=1")


@pytest.fixture
def made_env(tmp_path: Path) -> Iterator[Env]:
    with pets_env(tmp_path, local_mode=False, in_ram=True) as e:
        e.catalog.derive("pets", 1, "labels.class=dog", to_dataset="made", owner="bob")
        e.catalog.update_dataset("made", acl={"eve": "reader"})
        yield e


def test_the_dataset_page_of_a_product_of_a_hidden_version_is_drawn_without_it(made_env):
    """``made@v1`` came from ``pets@v1``, and ``1`` is among ``made``'s own version numbers:
    the graph drew an edge from a node it never added (``KeyError: 'pets@v1'``, a 500)."""
    with browser_app(made_env) as app:
        eve = signed_in(app, token(made_env, "eve"))
        page = eve.get("/datasets/made")
        assert page.status_code == 200, page.text[:400]
        assert 'data-node="made@v1"' in page.text and 'data-node="pets@' not in page.text


def test_a_reader_of_the_product_only_gets_its_pages_without_the_source(made_env):
    with browser_app(made_env) as app:
        eve = signed_in(app, token(made_env, "eve"))
        for path in PAGES:
            page = eve.get(path)
            assert page.status_code == 200, (path, page.text[:400])
            assert "pets@" not in page.text and "/datasets/pets" not in page.text, path
        assert "(hidden dataset)" in eve.get("/datasets/made/versions/1").text
        assert eve.get("/datasets/pets").status_code == 404
        # the API answers the same version the same way
        api = eve.get(
            "/v1/datasets/made/versions/1", headers={"Authorization": f"Bearer {token(made_env, 'eve')}"}
        )
        assert api.json()["message"] in eve.get("/datasets/made/versions/1").text


def test_a_reader_of_the_source_sees_where_the_product_came_from(made_env):
    made_env.catalog.update_dataset("pets", acl={"eve": "reader"})
    with browser_app(made_env) as app:
        eve = signed_in(app, token(made_env, "eve"))
        page = eve.get("/datasets/made").text
        assert 'data-node="pets@v1"' in page and 'href="/datasets/pets/versions/1"' in page
        assert "derive pets@v1 where" in eve.get("/datasets/made/versions/1").text
