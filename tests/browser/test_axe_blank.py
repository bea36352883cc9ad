"""axe-core is in every document Chromium makes for a page, and in none of a blank one
(``Chrome.reset``'s ``about:blank`` between tests): a check of a page still runs axe-core, and
a check of a blank page fails for want of it rather than passing unchecked."""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser]


def test_a_page_is_checked_by_axe_and_a_blank_one_has_no_axe_to_pass_it(
    chrome: Chrome,  # noqa: F811
    server: str,
) -> None:
    chrome.driver.get("about:blank")
    with pytest.raises(AssertionError, match="axe-core did not run on about:blank"):
        chrome.axe()
    chrome.visit(f"{server}/datasets/pets")  # axe-core runs in the page's document: no violation
    assert chrome.driver.execute_cdp_cmd("Page.getFrameTree", {})["frameTree"]["frame"]["url"] == (
        f"{server}/datasets/pets"
    )
    assert chrome.axe() == []
