"""A bucket snapshot's merge (``Catalog.list_keys`` + ``listing_changes``, the commit a mount
makes of a bucket's listing) against a plain model: after every snapshot the version is
exactly the listing (a dict of key -> record), on every store.

Why: the merge reads the head's keys alone (the SQLite store selects the key column) and the
commit checks a chunk's puts by the column passes among its deletes; a key the merge or the
store orders differently, a delete it misses, or a re-put it skips is a version whose records
point at other bytes than the bucket's. Listings draw from keys that are prefixes of each
other, non-ASCII keys on both sides of the UTF-16 surrogate range (a store ordering by UTF-16
would disagree with the listing's UTF-8 order there), re-puts with other etags and sizes,
empty listings and listings equal to the head.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import Catalog, Record, Version
from datahub.catalog.catalog import listing_changes
from datahub.errors import NoChanges
from tests.catalog.conftest import make_store

KEYS = sorted(
    {
        "a",
        "a.txt",
        "a/b",
        "a/b/c",
        "a/b c",
        "a0",
        "a-",
        "a~",
        "ab",
        "b",
        "\u00e9",  # é (2 UTF-8 bytes)
        "e\u0301",  # e + combining acute: another key than é
        "\ue000",  # a private-use character above the surrogates: U+E000 < U+1F600 in UTF-8 order
        "\uff61",
        "\U0001f600",  # 😀, a surrogate pair in UTF-16 (sorts below U+E000 there)
        "\U0001f600/x",
        "\u65e5\u672c/x",
        "z",
    }
)
ETAGS = ["e1", "e2"]
CHUNK_SIZES = [1, 2, 3, 7, 2000]  # the check chunk holds puts and deletes mixed, or a few

_counter = itertools.count()


def _record(key: str, etag: str, size: int, tagged: bool) -> Record:
    return Record(key, f"s3://snap/{key}", etag, size, meta={"mtime": float(size)} if tagged else {})


listings = st.lists(
    st.dictionaries(
        st.sampled_from(KEYS),
        st.tuples(st.sampled_from(ETAGS), st.integers(0, 3), st.booleans()),
        max_size=len(KEYS),
    ),
    min_size=1,
    max_size=6,
)


def _snapshot(catalog: Catalog, dataset: str, listing: dict[str, Record]) -> Version | None:
    """Commit ``listing`` as the bucket lister does: the head's keys merged with the listing in
    key order, on base = the head. None when the commit made no version (nothing to change)."""
    head = catalog.store.head(dataset) or 0
    keys: Iterator[str] = catalog.list_keys(dataset, head) if head else iter(())
    try:
        version = catalog.commit(
            dataset, listing_changes(keys, (listing[k] for k in sorted(listing))), base=head, message="snap"
        )
    except NoChanges:
        return None
    return version


def check_snapshots(catalog: Catalog, steps: list[dict]) -> None:
    dataset = f"snap-{next(_counter)}"
    catalog.create_dataset(dataset)
    versions: dict[int, dict[str, Record]] = {}
    head: dict[str, Record] = {}
    for step in steps:
        listing = {k: _record(k, *v) for k, v in step.items()}
        version = _snapshot(catalog, dataset, listing)
        if version is None:
            assert not listing and not head, "a snapshot that changes the version made none"
            continue
        seq = version.seq
        assert seq == max(versions, default=0) + 1
        assert version.record_count == len(listing)
        assert version.added == len(listing.keys() - head.keys())
        assert version.removed == len(head.keys() - listing.keys())
        assert version.total_bytes == sum(r.size for r in listing.values())
        versions[seq] = head = listing
    for seq, model in versions.items():  # every version still reads as it was committed
        listed = list(catalog.list_records(dataset, seq))
        assert [r.key for r in listed] == sorted(model), seq
        assert {r.key: r for r in listed} == model, seq
        assert list(catalog.list_keys(dataset, seq)) == sorted(model), seq
        for key, record in model.items():
            assert catalog.get_record(dataset, seq, key) == record


@pytest.fixture(scope="module", params=["sqlite", "mongomock", "http"])
def snapshot_catalog(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Catalog]:
    """One store per kind for the module (a dataset per example): tiny batches and pages, so a
    handful of keys crosses the commit's batch and the key listing's page borders."""
    store = make_store(request.param, tmp_path_factory.mktemp(request.param), batch_size=2, page_size=3)
    try:
        yield Catalog(store)
    finally:
        store.close()


#: examples per store: the merge's logic is the catalog's, run in full on SQLite; the other
#: stores differ only in how they order and page keys, which a few examples of the same
#: strategy cross (each of theirs costs 5-10x a SQLite one: mongomock's Python, the HTTP hops)
EXAMPLES = {"sqlite": 60, "mongomock": 12, "http": 12}


def test_snapshots_are_exactly_their_listings(
    snapshot_catalog: Catalog, request: pytest.FixtureRequest
) -> None:
    import datahub.catalog.catalog as catalog_module

    examples = EXAMPLES[request.node.callspec.params["snapshot_catalog"]]

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(steps=listings, chunk=st.sampled_from(CHUNK_SIZES))
    def check(steps: list[dict], chunk: int) -> None:
        saved = catalog_module.CHECK_CHUNK
        catalog_module.CHECK_CHUNK = chunk
        try:
            check_snapshots(snapshot_catalog, steps)
        finally:
            catalog_module.CHECK_CHUNK = saved

    check()


def test_keys_on_both_sides_of_the_surrogates(snapshot_catalog: Catalog) -> None:
    """A fixed case of the above: the head holds U+1F600 and U+E000; the listing keeps only the
    first. A store ordering keys by UTF-16 would list U+1F600 first, and the merge would delete
    the key the listing keeps or keep the one it lacks."""
    check_snapshots(
        snapshot_catalog,
        [
            {"\ue000": ("e1", 1, False), "\U0001f600": ("e1", 1, False), "a": ("e1", 1, True)},
            {"\U0001f600": ("e2", 2, False), "\uff61": ("e1", 3, False)},
            {},
            {"\ue000": ("e1", 1, False)},
        ],
    )
