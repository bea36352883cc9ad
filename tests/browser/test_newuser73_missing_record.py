"""What newuser73 met opening a record's address that names none (a key mistyped, or one a
later version removed): the page said only "dataset 'pets' version 2 has no record
'train/cat/999.jpg'", with nothing on where the version's records are. It now names the
``datahub ls`` that lists the record's folder (the version, when that folder is empty too), as
the server's user runs it."""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(
    ("key", "listing", "what"),
    [
        ("train/cat/999.jpg", "ls pets@v2 --prefix train/cat/", "its folder 'train/cat/'"),
        ("nowhere/999.jpg", "ls pets@v2", "pets@v2"),
        ("999.jpg", "ls pets@v2", "pets@v2"),
    ],
)
def test_a_missing_record_names_the_listing_of_its_folder(
    client: TestClient, key: str, listing: str, what: str
) -> None:
    page = client.get(f"/datasets/pets/versions/2/records/{key}", headers={"Accept": "text/html"})
    assert page.status_code == 404, page.text[:300]
    said = html.unescape(re.search(r'<p class="error-message"[^>]*>(.*?)</p>', page.text, re.S)[1])
    assert f"dataset 'pets' version 2 has no record '{key}'" in said, said
    command = re.search(r"<code>(.*?)</code>", said)
    assert command is not None and command[1].endswith(listing), said
    assert f"lists the records of {what}" in said, said
