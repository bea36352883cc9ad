"""What newuser26 met typing a folder into the version page's address without its closing '/'.

``/datasets/pets/versions/2?prefix=train/cat`` listed one folder named ``/`` (the keys under
``train/cat`` start with ``/`` there) under "Records in train/cat", and the breadcrumbs ended
at ``train``. Such an address now goes to that folder, or to the record of that key.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser


def _entries(page: str) -> list[str]:
    return re.findall(r'<span class="entry-name">([^<]*)</span>', page)


def test_a_folder_without_its_slash_goes_to_that_folder(client) -> None:
    resp = client.get("/datasets/pets/versions/2?prefix=train/cat", follow_redirects=False)
    assert resp.status_code == 303, f"{resp.status_code}: entries {_entries(resp.text)}"
    assert resp.headers["location"] == "/datasets/pets/versions/2?prefix=train%2Fcat%2F"
    page = client.get(resp.headers["location"]).text
    assert "/" not in _entries(page)
    assert "001.jpg" in _entries(page)
    crumbs = re.search(r'<nav class="crumbs".*?</nav>', page, re.S).group(0)
    assert re.findall(r">([^<>]+)</a>", crumbs) == ["Datasets", "pets", "v2", "train", "cat"]


def test_a_key_given_as_the_folder_goes_to_its_record_and_a_filter_is_kept(client) -> None:
    resp = client.get("/datasets/pets/versions/latest?prefix=train/cat/001.jpg", follow_redirects=False)
    assert resp.status_code == 303
    assert resp.headers["location"] == "/datasets/pets/versions/latest/records/train/cat/001.jpg"
    assert client.get(resp.headers["location"]).status_code == 200
    resp = client.get(
        "/datasets/pets/versions/golden", params={"prefix": "train/ca", "filter": "labels.class=dog"},
        follow_redirects=False,
    )  # fmt: skip
    assert resp.status_code == 303
    assert resp.headers["location"] == (
        "/datasets/pets/versions/golden?prefix=train%2Fca%2F&filter=labels.class%3Ddog"
    )
    page = client.get(resp.headers["location"]).text
    assert "No record of pets@v2 is under <code>train/ca/</code>." in page  # and where to go instead


def test_a_filter_that_matches_nothing_names_the_labels_there(client) -> None:
    """``labels.clas=cat`` (misspelt) or ``labels.class=Cat`` said only "No record matches
    labels.clas=cat here.": the page now names the labels the records there have."""
    for typed in ("labels.clas=cat", "labels.class=Cat"):
        page = client.get("/datasets/pets/versions/2", params={"prefix": "train/", "filter": typed}).text
        said = re.sub(
            r"\s+", " ", re.sub(r"<[^>]+>", "", re.search(r'id="no-records">(.*?)</p>', page, re.S)[1])
        )
        assert said == (
            f"No record matches {typed} here. The labels of the records here: labels.class: dog, cat; "
            "labels.checked: true."
        ), said
    page = client.get("/datasets/pets/versions/2", params={"filter": "size>100000000"}).text
    assert "The labels of the records here: <code>labels.class: dog, cat, bird" in page  # the top level too


def test_an_address_cut_back_to_records_goes_to_the_version(client) -> None:
    """``/datasets/pets/versions/2/records`` (a record's address with its key cut off) answered
    400 "invalid key: a record key must be a non-empty relative path"."""
    resp = client.get("/datasets/pets/versions/2/records/", follow_redirects=False)
    assert resp.status_code == 303, f"{resp.status_code}: {resp.text[:300]}"
    assert resp.headers["location"] == "/datasets/pets/versions/2"
    assert client.get("/datasets/pets/versions/golden/records").url.path == "/datasets/pets/versions/golden"
    assert client.get("/datasets/nope/versions/1/records/").status_code == 404  # a missing dataset first
