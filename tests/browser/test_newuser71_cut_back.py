"""What newuser71 met cutting a page's address back in the address bar, as one climbs a folder:
``/datasets/pets/versions/2`` cut to ``/datasets/pets/versions``, and that to ``/datasets``,
were "404 no page at …: start from the datasets at /", though the page meant is plain (the
dataset's, which lists its versions; the datasets'). ``…/records`` cut back already went to
the version's page (newuser26). Each now goes there; a dataset the caller may not read is
still the 404 a missing one gives."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.browser.chrome import Chrome, chrome  # noqa: F401

pytestmark = pytest.mark.browser
PAGE = {"Accept": "text/html"}


def test_a_cut_back_address_goes_to_the_page_above(chrome: Chrome, server: str) -> None:  # noqa: F811
    c = chrome
    for typed, lands, title in (
        ("/datasets/pets/versions", "/datasets/pets", "pets · datahub"),
        ("/datasets/pets/versions/", "/datasets/pets", "pets · datahub"),
        ("/datasets", "/", "Datasets · datahub"),
        ("/datasets/", "/", "Datasets · datahub"),
    ):
        c.visit(server + typed)
        assert c.driver.current_url == server + lands, (typed, c.driver.current_url)
        assert c.driver.title == title, (typed, c.driver.title)


def test_a_cut_back_address_of_a_missing_dataset_is_its_404(client: TestClient) -> None:
    answer = client.get("/datasets/nope/versions", headers=PAGE, follow_redirects=False)
    assert answer.status_code == 404 and "dataset &#39;nope&#39; not found" in answer.text, answer.text[:300]
    went = client.get("/datasets/pets/versions", headers=PAGE, follow_redirects=False)
    assert went.status_code == 303 and went.headers["location"] == "/datasets/pets"
