"""Paging invariants of the browser's listings, against reference models (hypothesis).

Folders: walking every page of ``folders.browse`` under any prefix yields exactly the direct
children of that prefix (each folder once, each file once) in key order, whatever the page
size. Diffs: walking every page yields the catalog's whole diff, in order. Datasets: the
list pages through every readable name once. Also: a thumbnail is made once, then served
from the browser's preview store.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.api.access import Principal
from datahub.browser import diffs, folders, listing
from datahub.catalog import Delete, Patch, Put, Record, open_catalog
from datahub.catalog.filter import RecordFilter
from tests.ram import ram_dir

SEGMENT = st.sampled_from(["a", "b", "ab", "a-b", "b.c", "z", "ä", "日本", "a b", "<x>"])
KEYS = st.lists(st.lists(SEGMENT, min_size=1, max_size=4).map("/".join), min_size=1, max_size=40, unique=True)


def reference(keys: list[str], prefix: str) -> list[str]:
    """Direct children of ``prefix``: "name/" for folders, "name" for files, in key order."""
    children: dict[str, None] = {}
    for key in sorted(keys):
        if key.startswith(prefix):
            head, slash, _ = key[len(prefix) :].partition("/")
            children[head + slash] = None
    return list(children)


def walk(catalog, prefix: str, limit: int, where=None) -> list[str]:
    names, after = [], ""
    while True:
        entries, after = folders.browse(catalog, "d", 1, prefix=prefix, where=where, after=after, limit=limit)
        names += [e.name for e in entries]
        if after is None:
            return names


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=KEYS, limit=st.integers(1, 7), data=st.data())
def test_folder_pages_are_the_direct_children_in_order(tmp_path_factory, keys, limit, data):
    # a catalog per example, in RAM: on disk its commit's fsyncs were most of the example's wall
    with ram_dir(tmp_path_factory.mktemp("f")) as where:
        _folder_pages(open_catalog(f"sqlite:///{where / 'c.db'}"), keys, limit, data)


def _folder_pages(catalog, keys: list[str], limit: int, data) -> None:
    try:
        catalog.create_dataset("d")
        records = [
            Record(k, f"memory://b/{i}", "e", i, meta={"even": i % 2 == 0}) for i, k in enumerate(keys)
        ]
        catalog.commit("d", [Put(r) for r in records])
        folders_seen = sorted({k.rsplit("/", 1)[0] + "/" for k in keys if "/" in k} | {""})
        prefix = data.draw(st.sampled_from(folders_seen))
        assert walk(catalog, prefix, limit) == reference(keys, prefix)
        # with a filter: the children holding at least one matching record
        even = [k for i, k in enumerate(keys) if i % 2 == 0]
        assert walk(catalog, prefix, limit, where=_even()) == reference(even, prefix)
    finally:
        catalog.close()


def _even() -> RecordFilter:
    return RecordFilter.parse("meta.even=true")


def test_filtered_folders(tmp_path: Path):
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}")
    keys = ["a/1", "a/2", "b/1", "c", "d/e/f"]
    catalog.create_dataset("d")
    catalog.commit(
        "d",
        [Put(Record(k, f"memory://b/{i}", "e", i, meta={"even": i % 2 == 0})) for i, k in enumerate(keys)],
    )
    assert walk(catalog, "", 1, where=_even()) == ["a/", "b/", "d/"]  # records 0, 2, 4
    assert walk(catalog, "", 2) == ["a/", "b/", "c", "d/"]
    catalog.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 60), limit=st.integers(1, 9), data=st.data())
def test_diff_pages_are_the_whole_diff_in_order(tmp_path_factory, n, limit, data):
    with ram_dir(tmp_path_factory.mktemp("d")) as where:  # as the folder pages' examples
        _diff_pages(open_catalog(f"sqlite:///{where / 'c.db'}"), n, limit, data)


def _diff_pages(catalog, n: int, limit: int, data) -> None:
    try:
        catalog.create_dataset("d")
        catalog.commit("d", [Put(Record(f"k/{i:03d}", f"memory://b/{i}", "e", i)) for i in range(n)])
        touched = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
        changes = [Patch(f"k/{i:03d}", labels={"x": 1}) if i % 2 else Delete(f"k/{i:03d}") for i in touched]
        changes.append(Put(Record("new", "memory://b/new", "e", 1)))
        catalog.commit("d", changes)
        a, b = data.draw(st.sampled_from([(1, 2), (2, 1), (0, 2)]))
        seen, after = [], ""
        while True:
            rows, after = diffs.page(catalog, "d", a, b, after=after or "", limit=limit)
            seen += [(r.entry.kind, r.entry.key) for r in rows]
            if after is None:
                break
        assert seen == [(e.kind, e.key) for e in catalog.diff("d", a, b)]
        old = None if a == 0 else catalog.resolve("d", a)
        counts = diffs.Counts().get(catalog, "d", old, catalog.resolve("d", b))
        assert counts == tuple(
            sum(1 for k, _ in seen if k == kind) for kind in ("added", "removed", "modified")
        )
    finally:
        catalog.close()


def test_dataset_list_pages_through_every_readable_name(tmp_path: Path):
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}")
    for i in range(23):
        catalog.create_dataset(f"ds-{i:02d}", owner="alice" if i % 3 else "bob")
    alice = Principal("alice")
    names, after = [], ""
    while True:
        rows, last = listing.dataset_rows(catalog, alice, after=after, limit=5)
        names += [r.dataset.name for r in rows]
        if last is None:
            break
        after = last
    assert names == [f"ds-{i:02d}" for i in range(23) if i % 3]
    rows, _ = listing.dataset_rows(catalog, alice, search="S-1")
    assert [r.dataset.name for r in rows] == ["ds-10", "ds-11", "ds-13", "ds-14", "ds-16", "ds-17", "ds-19"]
    catalog.close()


def test_a_thumbnail_is_made_once_then_served_from_the_preview_store(client, app):
    previews = app.state.browser.images.preview_dir
    first = client.get("/thumbs/pets/2/train/cat/001.jpg")
    assert first.status_code == 200 and first.headers["content-type"] == "image/jpeg"
    # kept by the browser but asked for again at each use (caller74: it was max-age=604800, immutable)
    assert first.headers["cache-control"] == "private, no-cache" and first.headers["etag"]
    made = sorted(previews.glob("*.jpg"))
    assert len(made) == 1
    stamp = made[0].stat().st_mtime_ns
    again = client.get("/thumbs/pets/2/train/cat/001.jpg")
    assert again.content == first.content and made[0].stat().st_mtime_ns == stamp
    assert sorted(previews.glob("*.jpg")) == made
    # a record that is no picture gets a placeholder saying why, never an error in the page
    text = client.get("/thumbs/pets/2/README.txt")
    assert text.status_code == 200 and text.headers["x-datahub-error"] == "invalid_input"
    assert "not an image" in text.text


def test_versions_page_by_fifty_newest_first(client, env):
    for i in range(58):  # pets has 2 versions: 60 in all
        env.catalog.commit("pets", [Patch("README.txt", meta={"n": i})], message=f"edit {i}")
    first = client.get("/datasets/pets").text
    seqs = [int(s) for s in re.findall(r'<tr data-seq="(\d+)">', first)]
    assert seqs == list(range(60, 10, -1))
    older = re.search(r'id="older" href="\?before=(\d+)"', first)[1]
    rest = client.get(f"/datasets/pets?before={older}").text
    assert [int(s) for s in re.findall(r'<tr data-seq="(\d+)">', rest)] == list(range(10, 0, -1))
    assert 'id="older"' not in rest
    # a cursor that is not one of the pages' own is a clear 400 page, not a traceback
    bad = client.get("/datasets/pets/versions/1?cursor=%%%")
    assert (
        bad.status_code == 400 and "invalid cursor" in bad.text and "text/html" in bad.headers["content-type"]
    )
    bad_filter = client.get("/datasets/pets/versions/1?filter=size>abc")
    assert bad_filter.status_code == 400 and "size&gt;abc" in bad_filter.text
    # issue 37 item 5: a doubled '=' is the syntax shown, not an empty folder
    doubled = client.get("/datasets/pets/versions/1?filter=labels.class%3D%3Dcat")
    assert doubled.status_code == 400 and "is not an operator" in doubled.text
    assert "write labels.class=cat" in doubled.text


def test_a_page_parameter_that_does_not_fit_is_named_with_its_reason(client):
    """Before, every such page said only "a parameter of this page is not valid", leaving the
    reader to guess which of the address's parameters, and why."""
    page = client.get("/datasets/pets?before=abc", headers={"Accept": "text/html"})
    assert page.status_code == 400 and "text/html" in page.headers["content-type"]
    assert "before: &#39;abc&#39; is not a valid integer" in page.text, page.text
    thumb = client.get("/thumbs/pets/x/train/cat/001.jpg")
    assert thumb.status_code == 400 and "seq: &#39;x&#39; is not a valid integer" in thumb.text


def test_a_made_up_page_position_names_the_pages_own_parameter(client):
    """The dataset list pages by ``?after=``: a made-up one is refused naming ``after``, not
    the API's ``?cursor=``, which this page does not have."""
    page = client.get("/?after=abcd", headers={"Accept": "text/html"})
    assert page.status_code == 400, page.text
    assert "invalid after" in page.text and "without ?after=" in page.text, page.text
    assert "?cursor=" not in page.text
