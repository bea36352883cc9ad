"""What newuser27 met paging the dataset browser's listings in Chromium.

A later page of a listing (the datasets, a folder's records, a diff, a dataset's older
versions) had a "Next page" link only: the way back to the first page was the browser's back
button, once per page, or the address bar. A later page now links to the first one (the same
search, folder, filter or versions compared; no cursor), and the first page has no such link.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from datahub.catalog import Patch
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env, browser_app, pets_env, put, serving

pytestmark = pytest.mark.browser
N = 130  # records in one folder, and datasets: more than a page (100) of each


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Iterator[str]:
    with pets_env(tmp_path_factory.mktemp("many"), in_ram=True) as env:
        _fill(env)
        with browser_app(env) as app, serving(app) as base:
            yield base


def _fill(env: Env) -> None:
    c = env.catalog
    c.create_dataset("many", description="more than a page of everything")
    # not images: a page of 100 thumbnails is made on the first visit, a minute on a loaded machine
    c.commit("many", [put(env.objects, f"f/{i:04d}.txt", b"%d\n" % i, labels={"n": i}) for i in range(N)])
    c.commit("many", [Patch(f"f/{i:04d}.txt", labels={"n": -i - 1}) for i in range(N)])  # a diff of N
    for i in range(55):  # 57 versions: more than the dataset page's 50
        c.commit("many", [Patch("f/0000.txt", labels={"step": i})])
    for i in range(N):
        c.create_dataset(f"d{i:03d}")


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def _next_then_first(c: Chrome, shot: str) -> None:
    assert c.find_all("#first-page") == []  # the first page links to itself nowhere
    before = c.driver.current_url
    c.find("#next-page").click()
    c.wait_for_url(lambda url: url != before)
    c.check(f"{shot}-page2")
    c.find("#first-page").click()
    c.wait_for_url(lambda url: "cursor=" not in url and "after=" not in url)
    c.check()
    assert c.find_all("#first-page") == []


def test_a_later_page_of_the_datasets_links_back_to_the_first(chrome: Chrome, many: str) -> None:  # noqa: F811
    c = chrome
    # with and without a search
    c.visit(f"{many}/", "newuser27-datasets")
    first = c.find("#datasets tbody tr a").text
    _next_then_first(c, "newuser27-datasets")
    assert urlsplit(c.driver.current_url).path == "/" and _query(c.driver.current_url) == {}
    assert c.find("#datasets tbody tr a").text == first
    c.visit(f"{many}/?q=d")
    _next_then_first(c, "newuser27-datasets-q")
    assert _query(c.driver.current_url) == {"q": ["d"]}


def test_a_later_page_of_a_folder_or_a_diff_links_back_to_the_first(chrome: Chrome, many: str) -> None:  # noqa: F811
    c = chrome
    # a folder's records, with a filter kept
    c.visit(f"{many}/datasets/many/versions/2?prefix=f/&filter=labels.n%3C%3D0")
    keys = c.attrs("#entries li.file", "data-key")
    assert keys[:2] == ["f/0000.txt", "f/0001.txt"] and len(keys) == 100
    _next_then_first(c, "newuser27-folder")
    assert _query(c.driver.current_url) == {"prefix": ["f/"], "filter": ["labels.n<=0"]}
    assert c.attrs("#entries li.file", "data-key") == keys

    # a diff
    c.visit(f"{many}/datasets/many/diff?from=1&to=2")
    _next_then_first(c, "newuser27-diff")
    assert _query(c.driver.current_url) == {"from": ["1"], "to": ["2"]}
    assert c.find("#diff-entries > tbody > tr").get_attribute("data-key") == "f/0000.txt"


def test_older_versions_link_back_to_the_newest(chrome: Chrome, many: str) -> None:  # noqa: F811
    c = chrome
    c.visit(f"{many}/datasets/many")
    assert c.find_all("#newest") == []
    c.find("#older").click()
    c.wait_for_url(lambda url: "before=" in url)
    c.check("newuser27-older-versions")
    c.find("#newest").click()
    c.wait_for_url(lambda url: "before=" not in url)
    assert urlsplit(c.driver.current_url).path == "/datasets/many"
    assert c.find_all("#newest") == [] and c.find_all("#older")
