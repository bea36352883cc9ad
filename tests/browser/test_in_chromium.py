"""The browser's pages in headless Chromium: every page, hostile names, thumbnails, axe-core.

Each visit checks no alert opened, no console error, and no serious or critical axe-core
violation (``Chrome.visit``). Screenshots go to ``$DATAHUB_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest

from datahub.cli.serve_cmd import build_app
from datahub.web import CSP
from tests.browser.chrome import chrome  # noqa: F401 - the fixture
from tests.browser.conftest import EVIL, EVIL_KEY, serving
from tests.labelx.conftest import PASSWORD, add_users

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_every_page_with_hostile_names(chrome, env, server):  # noqa: F811
    c = chrome
    # a derive whose filter is hostile: its text is drawn in both datasets' lineage
    env.catalog.derive("pets", 2, f"labels.class={EVIL}", to_dataset="picked", message=EVIL)
    c.visit(f"{server}/", "1-datasets")
    assert [a.text for a in c.find_all("a.dataset-link")] == ["pets", "picked"]
    assert EVIL in c.find("td.desc").text  # shown as text, never run
    c.visit(f"{server}/?q=zzz", "1b-datasets-search-empty")
    assert c.find("#no-datasets").is_displayed()

    c.visit(f"{server}/datasets/pets", "2-dataset")
    rows = c.find_all("#versions tbody tr")
    assert [r.get_attribute("data-seq") for r in rows] == ["2", "1"]  # newest first
    assert EVIL in c.find('#versions tr[data-seq="1"] .message').text
    assert "golden → v2" in c.find("#tags").text
    assert c.find_all('#lineage g.edge[data-source="pets@v1"][data-target="pets@v2"]')
    assert EVIL in c.find('#lineage-edges li[data-target="picked@v1"]').text
    c.visit(f"{server}/datasets/picked", "2b-dataset-derived")
    assert EVIL in c.find('#versions tr[data-seq="1"]').text

    c.visit(f"{server}/datasets/pets/versions/2", "3-version-root")
    names = [e.text for e in c.find_all("#entries .entry-name")]
    assert names == ["README.txt", "train/", "val/"]
    snippets = c.driver.find_elements("css selector", ".snippet code")
    assert [s.text for s in snippets][:2] == [  # works as written: no blocked shell (issue 37 item 2)
        "mkdir -p /mnt/pets && datahub mount --background /mnt/pets pets@v2 && ls /mnt/pets/pets/v2",
        "datahub://pets@v2/",
    ]

    c.visit(f"{server}/datasets/pets/versions/2?prefix=val/", "4-version-val")
    thumbs = c.find_all("#entries img.thumb")
    assert len(thumbs) == 4
    assert all(c.driver.execute_script("return arguments[0].naturalWidth", t) > 0 for t in thumbs)
    assert EVIL_KEY.removeprefix("val/") in [e.text for e in c.find_all("#entries .entry-name")]

    c.visit(f"{server}/datasets/pets/versions/2?prefix=train/cat/&filter=labels.checked%3F", "5-filtered")
    assert [e.text for e in c.find_all("#entries .entry-name")] == ["000.jpg"]

    c.visit(f"{server}/datasets/pets/versions/2/records/{quote(EVIL_KEY, safe='/')}", "6-record-hostile")
    assert c.find("#record-key").text == EVIL_KEY
    as_json = json.dumps(EVIL, ensure_ascii=False)
    assert as_json in c.find("#record-labels").text and as_json in c.find("#record-meta").text

    c.visit(f"{server}/datasets/pets/diff?from=1&to=2", "7-diff")
    assert c.find("#diff-counts").text == "+1 added −1 removed ~3 modified"
    kinds = {
        r.get_attribute("data-key"): r.get_attribute("class")
        for r in c.find_all("#diff-entries > tbody > tr")
    }
    assert kinds == {
        "train/cat/000.jpg": "modified",
        "train/cat/009.jpg": "removed",
        "train/cat/010.jpg": "added",
        "train/dog/001.jpg": "modified",
        "val/000.jpg": "modified",
    }
    relabel = c.find('#diff-entries tr[data-key="train/cat/000.jpg"] table.changes').text
    assert (
        "labels.class" in relabel
        and '"cat"' in relabel
        and '"dog"' in relabel
        and "labels.checked" in relabel
    )
    picture = c.find_all('#diff-entries tr[data-key="train/dog/001.jpg"] img.thumb')
    assert len(picture) == 2  # before and after
    c.visit(f"{server}/datasets/nope", "8-not-found", error_page=True)
    assert "dataset 'nope' not found" in c.find(".error-message").text
    c.visit(f"{server}/login", "9-login-local-mode")


def test_labelx_pages_share_the_layout_and_pass_the_same_checks(chrome, env):  # noqa: F811
    """LabelX renders through the same base layout (datahub.web); its pages hold to the same
    bar: no console error, no serious or critical axe-core violation, the same CSP."""
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    try:
        add_users(next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx"), admin="admin")
        with serving(app) as base:
            chrome.visit(f"{base}/labelx/login", "40-labelx-login")
            chrome.find("#name").send_keys("admin")
            chrome.find("#password").send_keys(PASSWORD)
            chrome.find("#login").click()
            chrome.wait_for_url(lambda url: not url.endswith("/login"))
            chrome.check("41-labelx-home")
            assert chrome.find("header.topbar .brand").text == "LabelX"
            # under datahub serve every LabelX page links back to the dataset browser (issue 37 item 7)
            assert chrome.find("#datasets-link").get_attribute("href") == f"{base}/"
            # and LabelX's API reference is served from here too, offline (item 1)
            chrome.driver.get(f"{base}/labelx/api/docs")
            chrome.until(lambda d: d.find_elements("css selector", ".opblock"))
            chrome.settle()
            chrome.check("42-labelx-api-docs")
            assert httpx.get(f"{base}/labelx/api/docs").headers["content-security-policy"] == CSP
            assert httpx.get(f"{base}/labelx/login").headers["content-security-policy"] == CSP
            assert httpx.get(f"{base}/").headers["content-security-policy"] == CSP
    finally:
        cache.close()


def test_the_api_reference_is_served_from_here_with_the_network_closed(chrome, server):  # noqa: F811
    """Issue 37 item 1: /docs loaded Swagger UI from a public CDN, so offline the page was white,
    and it had no CSP. Now it comes from the installation under the shared CSP: the operations
    show, with no console error, while Chromium can reach nothing but loopback."""
    docs = httpx.get(f"{server}/docs")
    assert docs.status_code == 200 and docs.headers["content-security-policy"] == CSP
    assert "cdn" not in docs.text.lower() and "<script>" not in docs.text  # nothing inline, nothing outside
    chrome.driver.get(f"{server}/docs")
    chrome.until(lambda d: len(d.find_elements("css selector", ".opblock")) > 10)
    chrome.settle()
    chrome.check("50-api-docs")
    paths = [e.text for e in chrome.find_all(".opblock-summary-path")]
    assert "/v1/datasets/{name}" in paths and "/healthz" in paths
    assert chrome.find(".info .title").text.startswith("datahub")
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "apidocs.js"):
        r = httpx.get(f"{server}/docs/assets/{asset}")
        assert r.status_code == 200 and r.headers["content-security-policy"] == CSP
    assert httpx.get(f"{server}/docs/assets/swagger-ui-bundle.js.map").status_code == 404
    assert httpx.get(f"{server}/redoc").status_code == 404  # no second, CDN-loading page


def test_pages_share_one_width_and_say_what_they_show(chrome, env, server):  # noqa: F811
    """Issue 37 item 7, the browser's smaller faults, at 1600 px: one page width on every page;
    a label added in a diff says "absent" before; the charts' note agrees with the charts; the
    no-preview picture is legible at diff size; an unknown page is the HTML error page."""
    c = chrome
    widths = {}
    for name, path in [
        ("datasets", "/"),
        ("dataset", "/datasets/pets"),
        ("version", "/datasets/pets/versions/2"),
        ("record", "/datasets/pets/versions/2/records/train/cat/000.jpg"),
        ("diff", "/datasets/pets/diff?from=1&to=2"),
    ]:
        c.driver.set_window_size(1600, 1000)  # wider than any page may be
        c.driver.get(f"{server}{path}")
        c.settle()
        widths[name] = c.driver.execute_script("return document.querySelector('main').offsetWidth")
        c.check(f"60-width-{name}")
    assert len(set(widths.values())) == 1, widths
    c.visit(f"{server}/datasets/pets/diff?from=1&to=2", "61-diff-absent")
    checked = [
        r
        for r in c.find_all('#diff-entries tr[data-key="train/cat/000.jpg"] table.changes tr')
        if "labels.checked" in r.text
    ]
    assert checked and checked[0].find_element("css selector", "td.before").text == "absent"
    c.visit(f"{server}/datasets/pets/versions/2", "62-version-charts")
    count = env.catalog.resolve("pets", 2).record_count
    assert c.find("#charts-of").text == f"Of all {count} records of this version."
    c.visit(f"{server}/nosuchpage", "63-unknown-page", error_page=True)
    assert "no page at /nosuchpage" in c.find(".error-message").text
    assert httpx.get(f"{server}/nosuchpage").json()["error"]["code"] == "not_found"  # a script: JSON
    svg = httpx.get(f"{server}/thumbs/pets/2/README.txt")
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert 'viewBox="0 0 96 96"' in svg.text and 'font-size="13"' in svg.text  # >= 9.75 px at 72 px
