"""catalog43: ``PUT /v1/datasets/{name}/tags/{tag}`` answers the version it tagged.

The route set the tag, then resolved the tag again for its answer: another writer moving the
tag in between (two PUTs of one tag at once, ``datahub tag`` beside the browser) made the
answer that writer's version, so a caller told "gold -> v1" had set gold to v2. The answer is
now the version this request tagged. The other writer is a second catalog on the same SQLite
file, moving the tag right after this request's own write (the store's ``set_tag`` wrapped).
"""

from __future__ import annotations

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put
from tests.api.conftest import Api, record


def test_a_tag_moved_by_another_writer_meanwhile_does_not_change_this_answer(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.catalog.commit("pets", [Put(record("img/new.jpg"))], author="owner")
    own_write = api.catalog.store.set_tag

    def then_another_writer(dataset: str, tag: str, seq: int) -> None:
        own_write(dataset, tag, seq)
        with open_catalog(api.config.resolved_catalog_url) as other:
            other.tag(dataset, tag, 1 if seq == 2 else 2)

    monkeypatch.setattr(api.catalog.store, "set_tag", then_another_writer)
    answer = api.put("/v1/datasets/pets/tags/gold", who="bob", json={"ref": 2})
    assert answer.status_code == 200, answer.text
    assert answer.json()["seq"] == 2  # the version this request tagged
    assert api.catalog.resolve("pets", "gold").seq == 1  # the other writer's move stands
