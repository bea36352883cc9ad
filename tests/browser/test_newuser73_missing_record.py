"""What newuser73 met in the browser's addresses. A record's address that names none (a key mistyped, or one a
later version removed): the page said only "dataset 'pets' version 2 has no record
'train/cat/999.jpg'", with nothing on where the version's records are. It now names the
``datahub ls`` that lists the record's folder (the version, when that folder is empty too), as
the server's user runs it. A version's address written the CLI's way
(``/datasets/pets/versions/pets@v1``) was refused naming 'pets@pets@v1'; it goes to the version."""

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


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("@v1", "/datasets/pets/versions/v1"),
        ("pets@v1", "/datasets/pets/versions/v1"),
        ("pets@golden?prefix=train%2F", "/datasets/pets/versions/golden?prefix=train%2F"),
    ],
)
def test_a_version_address_written_the_cli_way_goes_to_the_version(
    client: TestClient, typed: str, meant: str
) -> None:
    """``/datasets/pets/versions/pets@v1`` (the CLI's ``pets@v1`` put into the address) said
    "invalid version 'pets@pets@v1': write DATASET@VERSION", naming what nobody typed, where
    ``/datasets/pets@v1`` goes to the version."""
    answer = client.get(f"/datasets/pets/versions/{typed}", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == meant, (
        answer.status_code,
        answer.text,
    )
    assert client.get(meant).status_code == 200


def test_a_version_of_another_dataset_in_the_address_is_still_refused(client: TestClient) -> None:
    page = client.get("/datasets/pets/versions/cats@v1", headers={"Accept": "text/html"})
    assert page.status_code == 400 and "invalid version" in html.unescape(page.text), page.text[:300]
