"""review36: the browser's folder pages with keys holding U+10FFFF (the greatest code point,
valid in a key).

- The folder walk (``folders.by_keys``, with a filter) jumps past a folder with
  ``past_subtree``. It started after the folder + one U+10FFFF, and a key below it starting
  with U+10FFFF U+10FFFF began the next batch: the folder again, for ever, in one request
  (the server's thread spinning, its list of entries growing).
- A page that ended with a file named U+10FFFF (``f/`` + U+10FFFF) gave the cursor of the
  folder ``f/`` itself, so the next page listed ``f/`` from its start again, and every next
  page was the same."""

from __future__ import annotations

import pytest

from datahub.browser import folders
from datahub.catalog import Put, Record, RecordFilter, open_catalog

TOP = "\U0010ffff"
KEYS = ["a", "d/x", f"d/{TOP}{TOP}", f"d/{TOP}/y", "e", f"f/{TOP}", f"f/{TOP}z"]


@pytest.fixture
def catalog(config):
    config.home_path.mkdir(parents=True, exist_ok=True)
    cat = open_catalog(config.resolved_catalog_url)
    cat.create_dataset("ds")
    cat.commit("ds", [Put(Record(k, f"memory://b/{k}", "e", 1, labels={"n": 1})) for k in KEYS], message="v1")
    yield cat
    cat.close()


def _pages(catalog, monkeypatch, prefix: str, where: RecordFilter | None, limit: int) -> list[str]:
    real, batches = catalog.store.list_records, []

    def list_records(*args, **kwargs):
        batches.append(kwargs.get("start_after"))
        assert len(batches) <= 40, "the folder walk keeps listing"
        return real(*args, **kwargs)

    monkeypatch.setattr(catalog.store, "list_records", list_records)
    after, names = "", []
    for _ in range(20):
        entries, after = folders.browse(
            catalog, "ds", 1, prefix=prefix, where=where, after=after, limit=limit
        )
        names += [e.name for e in entries]
        if after is None:
            return names
    raise AssertionError(f"no last page: {names}")


WHERE = RecordFilter.parse("labels.n = 1")


@pytest.mark.parametrize("limit", [1, 2, 100])
@pytest.mark.parametrize("where", [WHERE, None], ids=["filtered", "by-directory"])
@pytest.mark.parametrize(
    ("prefix", "want"),
    [("", ["a", "d/", "e", "f/"]), ("d/", ["x", f"{TOP}/", f"{TOP}{TOP}"]), ("f/", [TOP, f"{TOP}z"])],
)
def test_each_entry_is_listed_once_across_pages(catalog, monkeypatch, limit, where, prefix, want) -> None:
    assert _pages(catalog, monkeypatch, prefix, where, limit) == want
