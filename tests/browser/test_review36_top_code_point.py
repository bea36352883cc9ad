"""review36: the browser's folder walk (``folders.by_keys``, with a filter) jumps past a folder
with ``past_subtree``. It started after the folder + one U+10FFFF, and a key below it starting
with U+10FFFF U+10FFFF (a valid key) began the next batch: the folder again, for ever, in one
request (the server's thread spinning, its list of entries growing)."""

from __future__ import annotations

import pytest

from datahub.browser import folders
from datahub.catalog import Put, Record, RecordFilter, open_catalog

TOP = "\U0010ffff"
KEYS = ["a", "d/x", f"d/{TOP}{TOP}", f"d/{TOP}/y", "e"]


@pytest.fixture
def catalog(config):
    config.home_path.mkdir(parents=True, exist_ok=True)
    cat = open_catalog(config.resolved_catalog_url)
    cat.create_dataset("ds")
    cat.commit("ds", [Put(Record(k, f"memory://b/{k}", "e", 1, labels={"n": 1})) for k in KEYS], message="v1")
    yield cat
    cat.close()


@pytest.mark.parametrize("limit", [1, 2, 100])
def test_a_filtered_folder_walk_lists_each_folder_once(catalog, monkeypatch, limit) -> None:
    real, batches = catalog.store.list_records, []

    def list_records(*args, **kwargs):
        batches.append(kwargs.get("start_after"))
        assert len(batches) <= 30, "the folder walk keeps listing"
        return real(*args, **kwargs)

    monkeypatch.setattr(catalog.store, "list_records", list_records)
    where, after, names = RecordFilter.parse("labels.n = 1"), "", []
    while True:
        entries, after = folders.browse(catalog, "ds", 1, where=where, after=after, limit=limit)
        names += [e.name for e in entries]
        if after is None:
            break
    assert names == ["a", "d/", "e"]
