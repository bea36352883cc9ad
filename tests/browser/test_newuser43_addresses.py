"""A record's address that names a folder goes to that folder's page (newuser43).

``/datasets/pets/versions/2/records/train/cat/`` (a record's address cut back to its folder, or
typed as a mount shows the folder) answered 400 "invalid key 'train/cat/': empty, '.' or '..'
path segments are not allowed", which names none of what was typed; without the closing slash,
404 "has no record 'train/cat'". Both now go to the folder's page, which lists its records; a
key that is neither a record nor a folder is still the record's 404.
"""

from __future__ import annotations

import html

from fastapi.testclient import TestClient


def test_a_record_address_naming_a_folder_goes_to_the_folders_page(client: TestClient) -> None:
    for typed in ("train/cat/", "train/cat"):
        answer = client.get(f"/datasets/pets/versions/2/records/{typed}", follow_redirects=False)
        assert answer.status_code == 303, (typed, answer.status_code, answer.text[:300])
        assert answer.headers["location"] == "/datasets/pets/versions/2?prefix=train%2Fcat%2F", typed
        page = client.get(answer.headers["location"])
        assert page.status_code == 200 and 'data-key="train/cat/001.jpg"' in page.text
    # by a tag, as the address was typed
    answer = client.get("/datasets/pets/versions/golden/records/val/", follow_redirects=False)
    assert answer.headers["location"] == "/datasets/pets/versions/golden?prefix=val%2F"
    # a record is still its page; a key that is neither a record nor a folder still its 404
    assert client.get("/datasets/pets/versions/2/records/train/cat/001.jpg").status_code == 200
    missing = client.get("/datasets/pets/versions/2/records/train/cow", headers={"Accept": "text/html"})
    assert missing.status_code == 404
    assert "version 2 has no record 'train/cow'" in html.unescape(missing.text)
