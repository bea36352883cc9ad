"""A version page of a folder that holds nothing (a mistyped ``?prefix=train/nope/``) says
which folder holds records; its snippets named the empty folder, so "Mount it" ended
``ls /mnt/pets/pets/v2/train/nope``, which fails as written (newuser25). They now name the
folder the page sends the reader to."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient


def _snippets(page: str) -> list[str]:
    return [
        html.unescape(t) for t in re.findall(r'id="snippet-text-\d+"[^>]*>(.*?)</(?:code|pre)>', page, re.S)
    ]


def test_the_snippets_of_an_empty_folder_name_the_folder_that_holds_records(client: TestClient) -> None:
    page = client.get("/datasets/pets/versions/2", params={"prefix": "train/nope/"})
    assert page.status_code == 200 and 'id="nearest"' in page.text
    mount, url, script = _snippets(page.text)
    assert mount.endswith(" && ls /mnt/pets/pets/v2/train"), mount
    assert url == "datahub://pets@v2/train/"
    assert "prefix='train/'" in script and "nope" not in script
    # a folder that holds records keeps its own snippets
    mount, url, _ = _snippets(client.get("/datasets/pets/versions/2", params={"prefix": "train/cat/"}).text)
    assert mount.endswith(" && ls /mnt/pets/pets/v2/train/cat") and url == "datahub://pets@v2/train/cat/"


def test_the_error_page_of_a_name_no_dataset_can_have_links_no_dataset(client: TestClient) -> None:
    """``/datasets/Bad%20Name`` said "invalid dataset name" above "Back to Bad Name", a link to
    the same refusal; a bad tag of a real dataset still leads back to it."""
    page = client.get("/datasets/Bad%20Name", headers={"Accept": "text/html"})
    assert page.status_code == 400 and "invalid dataset name" in html.unescape(page.text)
    assert "Back to" not in page.text and 'href="/datasets/Bad' not in page.text
    page = client.get("/datasets/pets/versions/Bad%20Tag", headers={"Accept": "text/html"})
    assert page.status_code == 400 and '<a href="/datasets/pets">Back to pets</a>' in page.text
