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
