"""The browser's pages in a phone's window (390 px wide), in headless Chromium.

Each page passes the usual visit (no console error, no serious or critical axe-core
violation) at that width, and: the page itself never scrolls sideways (a wide table or graph
scrolls inside its own card), no breadcrumb is broken across lines, a diff's changed fields
and thumbnails are in view (in five columns they lay past the card's edge), and the lineage graph
opens on this dataset's own versions (its middle column), not on an empty stretch of its
left column.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import chrome  # noqa: F401 - the fixture
from tests.browser.conftest import EVIL_KEY

pytestmark = [pytest.mark.browser, pytest.mark.slow]
PHONE = (390, 844)


def test_every_page_fits_a_phone(chrome, env, server):  # noqa: F811
    c = chrome
    env.catalog.derive("pets", 2, "labels.class=cat", to_dataset="picked", message="cats only")
    pages = {
        "datasets": "/",
        "dataset": "/datasets/pets",
        "derived": "/datasets/picked",
        "version": "/datasets/pets/versions/2",
        "folder": "/datasets/pets/versions/2?prefix=train/cat/",
        "record": f"/datasets/pets/versions/1/records/{EVIL_KEY}",
        "diff": "/datasets/pets/diff?from=1&to=2",
    }
    for name, path in pages.items():
        c.driver.set_window_size(*PHONE)
        c.visit(server + path)
        c.save_view(f"narrow-{name}")
        wide = c.driver.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert wide[0] <= wide[1], f"{path}: the page scrolls sideways ({wide[0]} px in {wide[1]})"
        lines = "return arguments[0].getClientRects().length"
        broken = [
            a.text for a in c.find_all(".crumbs a, .crumbs span") if c.driver.execute_script(lines, a) > 1
        ]
        assert broken == [], f"{path}: breadcrumbs broken across lines: {broken}"
        if name == "diff":  # what changed is in view, not past the card's right edge
            out = c.driver.execute_script(
                "const card = document.getElementById('diff-entries').closest('.card').getBoundingClientRect();"
                "return Array.from(document.querySelectorAll('#diff-entries .changes, #diff-entries .thumb'))"
                " .filter(t => t.getBoundingClientRect().right > card.right + 0.5)"
                " .map(t => t.closest('tr').dataset.key);"
            )
            assert out == [], f"{path}: changes of {out} lie past the card's right edge"
        if c.find_all("#lineage"):
            seen = c.driver.execute_script(
                "const box = document.querySelector('.graph-scroll').getBoundingClientRect();"
                "return Array.from(document.querySelectorAll('#lineage .node.col-1 rect')).some(r => {"
                " const n = r.getBoundingClientRect(); return n.left >= box.left && n.right <= box.right; });"
            )
            assert seen, f"{path}: the lineage graph opens without one of this dataset's versions in view"
