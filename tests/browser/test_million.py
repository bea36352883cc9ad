"""A version of 10^6 records, and a diff of 10^5 entries, browse by pages in Chromium.

The version is built fast, straight through the catalog store's streamed commit (a million
change-set lines in checked chunks, what ``datahub commit --changes`` writes by C). Ten folders of 10^5 records each: the root lists the
ten folders (one keyset jump each), a folder pages 100 records at a time by cursor, a filter
pages the same way, and the charts summarise a bounded sample and say so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Patch
from datahub.catalog.put_lines import CHUNK_LINES, PutLines, put_lines
from datahub.cli.serve_cmd import build_app
from tests.browser.chrome import chrome  # noqa: F401 - the fixture
from tests.browser.conftest import make_env, serving

pytestmark = [pytest.mark.browser, pytest.mark.slow]
N = 1_000_000


def key(i: int) -> str:
    return f"part-{i // 100_000}/{i:07d}.bin"


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Iterator[str]:
    # the records name s3:// objects that do not exist; nothing here reads their bytes, and a
    # read that did would reach a closed port of loopback (the discard port), never AWS
    env = make_env(Path(tmp_path_factory.mktemp("big")), s3_endpoint="http://127.0.0.1:9")
    env.catalog.create_dataset("big", description="a million records")

    # The 10^6 records as a change set's lines (`datahub commit --changes`' path: checked by
    # put_lines' one regex, inserted by C): 8.9 against 19.4 CPU-s for Put objects (suite time,
    # twenty-seventh stop). The Records the store reads back are the same either way.
    def lines() -> Iterator[PutLines]:
        for start in range(0, N, CHUNK_LINES):
            chunk = [
                f'{{"op":"put","record":{{"key":"{key(i)}","url":"s3://big/{i}","etag":"e{i}",'
                f'"size":{1000 + i % 5000},"labels":{{"class":"c{i % 7}"}}}}}}\n'
                for i in range(start, min(N, start + CHUNK_LINES))
            ]
            checked = put_lines(chunk)
            assert checked is not None, chunk[0]
            yield checked

    version = env.catalog.store.commit("big", 0, lines(), message="a million records")
    assert version.record_count == N
    relabel = (Patch(key(i), labels={"class": "checked"}) for i in range(0, N, 10))
    assert env.catalog.store.commit("big", 1, relabel, message="relabel a tenth").modified == N // 10
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=False)
    try:
        with serving(app) as base:
            yield base
    finally:
        cache.close()
        env.stores.close()
        env.catalog.close()


def entry_keys(browser) -> list[str]:
    return browser.attrs("#entries li.file", "data-key")  # one round trip, not one per record


def test_a_million_record_version_pages(chrome, big):  # noqa: F811
    chrome.visit(f"{big}/datasets/big/versions/1", "30-million-root")
    assert chrome.find("#version-title").text == "big@v1"
    assert [e.text for e in chrome.find_all("#entries .entry-name")] == [f"part-{n}/" for n in range(10)]
    chrome.driver.get(f"{big}/datasets/big/versions/1/charts/labels.svg")  # charts: a bounded sample
    assert "of the first 10,000 records" in chrome.driver.page_source
    chrome.driver.back()

    chrome.find_all("#entries li.folder a")[5].click()
    chrome.wait_for_url(lambda url: "prefix=part-5" in url)
    chrome.check("31-million-folder")
    expected = 500_000
    for page in range(3):
        assert entry_keys(chrome) == [key(i) for i in range(expected, expected + 100)], page
        expected += 100
        before = chrome.driver.current_url
        chrome.find("#next-page").click()
        chrome.wait_for_url(lambda url, before=before: url != before)
        chrome.check()
    assert entry_keys(chrome)[0] == key(expected)

    # a filter pages the same way, by cursor
    chrome.visit(
        f"{big}/datasets/big/versions/1?prefix=part-9/&filter=labels.class%3Dc3", "32-million-filter"
    )
    first = entry_keys(chrome)
    assert len(first) == 100 and all(int(k[7:14]) % 7 == 3 for k in first)
    chrome.find("#next-page").click()
    chrome.wait_for_url(lambda url: "cursor=" in url)
    second = entry_keys(chrome)
    assert len(second) == 100 and second[0] > first[-1] and all(int(k[7:14]) % 7 == 3 for k in second)


def test_a_diff_of_10_5_entries_pages(chrome, big):  # noqa: F811
    chrome.visit(f"{big}/datasets/big/diff?from=1&to=2", "33-big-diff")
    assert chrome.find("#diff-counts").text == "+0 added −0 removed ~100,000 modified"
    assert chrome.attrs("#diff-entries > tbody > tr", "data-key") == [key(i) for i in range(0, 1000, 10)]
    first = chrome.find("#diff-entries > tbody > tr")
    assert '"checked"' in first.find_element("css selector", "table.changes").text
    for page in range(2):
        before = chrome.driver.current_url
        chrome.find("#next-page").click()
        chrome.wait_for_url(lambda url, before=before: url != before)
        chrome.check()
        start = (page + 1) * 1000
        got = chrome.attrs("#diff-entries > tbody > tr", "data-key")
        assert got == [key(i) for i in range(start, start + 1000, 10)]
