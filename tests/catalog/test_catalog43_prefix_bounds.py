"""catalog43: a listing or diff prefix ending at a code point boundary, on every store.

``prefix_end`` took the next code point of the prefix's last character: after U+D7FF that is
a surrogate (SQLite and BSON cannot bind it: ``UnicodeEncodeError``), after U+10FFFF there is
none (``ValueError``), and the SQLite listing's lower seek bound took the code point before
U+E000, a surrogate again. Each was a bare traceback out of ``list_records``/``diff`` (and a
500, retried into ``catalog_unavailable``, through a remote catalog) for keys the catalog had
accepted. The bounds must select exactly the keys that start with the prefix.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datahub.catalog import Catalog, Delete, Put
from tests.catalog.conftest import rec

EDGES = ["\ud7ff", "\ue000", "\U0010ffff", "\ud7fe", "\ue001", "\U0010fffe", "z"]
KEYS = sorted(
    {f"a{c}" for c in EDGES} | {f"a{c}{d}" for c in EDGES for d in ("b", "\U0010ffff")} | {"a", "b"}
)
PREFIXES = ["a\ud7ff", "a\ue000", "a\U0010ffff", "a\U0010ffff\U0010ffff", "\U0010ffff", "a"]


def _with(prefix: str, keys: list[str]) -> list[str]:
    return [k for k in keys if k.startswith(prefix)]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_listing_and_diff_with_an_edge_prefix(catalog: Catalog, prefix: str) -> None:
    catalog.create_dataset("edges")
    catalog.commit("edges", [Put(rec(k)) for k in KEYS])
    gone = [k for k in KEYS if k.endswith("b")]
    catalog.commit("edges", [Delete(k) for k in gone])
    v2 = [k for k in KEYS if k not in gone]

    assert [r.key for r in catalog.list_records("edges", 1, prefix=prefix)] == _with(prefix, KEYS)
    assert [r.key for r in catalog.list_records("edges", 2, prefix=prefix)] == _with(prefix, v2)
    paged, after = [], ""
    while page := [
        r.key for r in catalog.list_records("edges", 1, prefix=prefix, start_after=after, limit=2)
    ]:
        paged, after = paged + page, page[-1]
    assert paged == _with(prefix, KEYS)
    assert [e.key for e in catalog.diff("edges", 0, 1, prefix=prefix)] == _with(prefix, KEYS)
    assert [(e.kind, e.key) for e in catalog.diff("edges", 1, 2, prefix=prefix)] == [
        ("removed", k) for k in _with(prefix, gone)
    ]


_CHARS = st.sampled_from(["a", "\ud7fe", "\ud7ff", "\ue000", "\ue001", "\U0010fffe", "\U0010ffff", "/"])


@given(prefix=st.text(_CHARS, min_size=1, max_size=4), key=st.text(_CHARS, max_size=6))
def test_bounds_select_exactly_the_prefixed_keys(prefix: str, key: str) -> None:
    from datahub.catalog.store import prefix_below, prefix_end  # prefix_below is new here

    end, below = prefix_end(prefix), prefix_below(prefix)
    for bound in (end, below):
        bound.encode("utf-8")  # never a surrogate: SQLite and BSON bind it
    assert (prefix <= key < end) == key.startswith(prefix)
    assert below < prefix and (below < key) >= key.startswith(prefix)
