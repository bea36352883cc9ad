"""newuser36: a version's address typed the way the CLI and a mount write it.

``/datasets/pets/v1`` (a mount's ``MNT/pets/v1``), ``/datasets/pets/v1/train/cat/`` and
``/datasets/pets@v1`` (``datahub ls pets@v1``) were "no page at …: start from the datasets at /"
and "400 invalid dataset name 'pets@v1'"; each now goes to the version's page, its folder or
its record, where the version, the key and access are checked as for any address."""

from __future__ import annotations

import pytest

PAGE = {"Accept": "text/html"}


@pytest.mark.parametrize(
    ("typed", "goes_to"),
    [
        ("/datasets/pets/v1", "/datasets/pets/versions/v1"),
        ("/datasets/pets/2", "/datasets/pets/versions/2"),
        ("/datasets/pets/latest", "/datasets/pets/versions/latest"),
        ("/datasets/pets/v2/train/cat/", "/datasets/pets/versions/v2?prefix=train%2Fcat%2F"),
        ("/datasets/pets/v2/train/cat/010.jpg", "/datasets/pets/versions/v2?prefix=train%2Fcat%2F010.jpg"),
        ("/datasets/pets@v1", "/datasets/pets/versions/v1"),
        ("/datasets/pets@golden", "/datasets/pets/versions/golden"),
        ("/datasets/pets@v2/val/", "/datasets/pets/versions/v2?prefix=val%2F"),
    ],
)
def test_a_version_typed_as_the_cli_or_a_mount_writes_it_goes_to_its_page(client, typed, goes_to):
    went = client.get(typed, headers=PAGE, follow_redirects=False)
    assert went.status_code == 303, (typed, went.status_code, went.text[:300])
    assert went.headers["location"] == goes_to


def test_the_address_a_guess_goes_to_is_served_and_checked_there(client):
    page = client.get("/datasets/pets/v2/train/cat/010.jpg", headers=PAGE)
    assert page.status_code == 200 and page.url.path == "/datasets/pets/versions/v2/records/train/cat/010.jpg"
    missing = client.get("/datasets/pets/v9", headers=PAGE)
    assert missing.status_code == 404 and "has no version 9" in missing.text, missing.text[:500]
    nobody = client.get("/datasets/nope/v1", headers=PAGE)
    assert nobody.status_code == 404 and "dataset &#39;nope&#39; not found" in nobody.text
    # anything else stays the unknown page, and a script still gets the API's JSON
    assert "no page at /datasets/pets/v1x" in client.get("/datasets/pets/v1x", headers=PAGE).text
    assert client.get("/datasets/pets/v1").json()["error"]["code"] == "not_found"
