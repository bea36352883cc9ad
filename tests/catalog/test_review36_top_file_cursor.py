"""review36: ``list_directory`` after a file named U+10FFFF (``f/`` + U+10FFFF, a valid key)
goes on with the level's next entries. The directory table's gaps took that cursor for the
cursor past the subtree ``f/``, the level itself, and the page after it was empty: a mount
paging ``f/`` lost every file after that one (and the browser repeated its first page)."""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog, Put, Record
from tests.catalog.conftest import make_store

TOP = "\U0010ffff"
FILES = ["a", "f/g", f"f/{TOP}", f"f/{TOP}z", f"f/{TOP}{TOP}", "h"]


@pytest.mark.parametrize("subdirectory", [False, True])
@pytest.mark.parametrize("kind", ["sqlite", "mongomock"])
def test_the_page_after_a_file_named_the_greatest_code_point_goes_on(kind, subdirectory, tmp_path) -> None:
    keys = FILES + ([f"f/{TOP}/y"] if subdirectory else [])
    catalog = Catalog(make_store(kind, tmp_path))
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", [Put(Record(k, f"memory://b/{k}", "e", 1)) for k in keys], message="v1")

        def names(**kwargs) -> list[str]:
            return [
                e if isinstance(e, str) else e[0]
                for e in catalog.list_directory("ds", 1, prefix="f/", **kwargs)
            ]

        whole = names()
        assert whole == [
            "f/g",
            f"f/{TOP}",
            *([f"f/{TOP}/"] if subdirectory else []),
            f"f/{TOP}z",
            f"f/{TOP}{TOP}",
        ]
        for i, entry in enumerate(whole):
            assert names(start_after=entry) == whole[i + 1 :], entry
        paged, after = [], ""
        while page := names(start_after=after, limit=1):
            paged += page
            after = page[-1]
            assert len(paged) <= len(whole), paged
        assert paged == whole
    finally:
        catalog.close()
