"""LabelX's top bar in a phone's window and a laptop's, in headless Chromium (newuser43).

Under ``datahub serve`` (LabelX at ``/labelx/``, with its "Datasets" link) the narrow bar wrapped
as one row of items: at 360 px "Log out" went to a row of its own under the brand, and at 400 px
beside "Datasets" and a reviewer's badge. Now the brand, the user with the role and "Log out"
keep the first row (the name cut with an ellipsis when it must give up room), the crumbs and
"Datasets" the second. Checked by the elements' rectangles: "Log out" on one line, inside the
window, overlapping nothing else of the bar; no page wider than the window.
"""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from tests.labelx.conftest import PASSWORD, add_users
from tests.labelx.test_browser import browser, new_page, no_page_errors, server, shot  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = "an.annotator.whose.name.is.as.long.as.labelx.allows.at.all.x-yz"  # 63: the longest allowed
PROJECT = "a-project-with-a-rather-long-name-for-layout-checks-of-labelx-p"  # 63

# each element of the bar: its rectangle, and the lines its text is laid out on (counted by the
# tops of its text's rectangles: an ellipsis gives two on one line)
GEOMETRY = """() => {
  const box = e => { const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const lines = e => { const r = document.createRange(); r.selectNodeContents(e);
    return new Set(Array.from(r.getClientRects(), c => Math.round(c.top))).size; };
  const parts = ['.brand', '#crumbs', '.toplink', '.avatar', '.role', '#logout'];
  const found = {};
  for (const s of parts) { const e = document.querySelector('.topbar ' + s);
    if (e && e.getBoundingClientRect().width) found[s] = {...box(e), lines: lines(e), text: e.textContent}; }
  const wide = Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right > innerWidth + 0.5)
    .map(e => e.tagName + '.' + e.className + ':' + (e.textContent || '').slice(0, 30));
  return {width: innerWidth, page: document.documentElement.scrollWidth, parts: found, wide};
}"""


@pytest.fixture
def app(app):
    """LabelX mounted as ``datahub serve`` mounts it, under /labelx: its bar links "Datasets"."""
    outer = FastAPI()
    outer.mount("/labelx", app)
    outer.state.labelx = app.state.labelx
    return outer


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


def test_log_out_stays_whole_on_the_first_row_at_every_width(app, server, browser) -> None:  # noqa: F811
    service, store = app.state.labelx.service, app.state.labelx.store
    add_users(app, **{LONG: "annotator"})
    project = service.create_project(
        store.user_by_name("admin"), name=PROJECT, dataset="pets", prefix="img/000", task_size=5,
        annotators=[LONG], schema={"kind": "classification", "classes": ["cat", "dog"]},
    )  # fmt: skip
    task = store.list_tasks(project.id)[0]["id"]
    pages = {
        "admin": ["/", "/admin", f"/projects/{project.id}"],
        "rita": ["/", f"/projects/{project.id}/review"],
        LONG: ["/", f"/tasks/{task}"],
    }
    for user, paths in pages.items():
        # one sign-in per user (its password hash is most of this test's CPU), then every width:
        # each page is loaded anew at each window width
        page = new_page(browser, 360, 800)
        page.goto(f"{server}/labelx/login")
        page.fill("#name", user)
        page.fill("#password", PASSWORD)
        page.click("#login")
        page.wait_for_url(f"{server}/labelx/")
        for width in (360, 400, 420, 700, 1360):  # 700: above the phone's layout, below 900's
            page.set_viewport_size({"width": width, "height": 800})
            for path in paths:
                page.goto(f"{server}/labelx{path}")
                page.locator("#crumbs > *").first.wait_for(state="attached")
                shot(
                    page,
                    f"newuser43-topbar-{width}-{user[:5]}-{path.strip('/').replace('/', '-')}",
                    full_page=False,
                )
                got = page.evaluate(GEOMETRY)
                where = (width, user[:5], path, got)
                parts = got["parts"]
                assert got["page"] <= got["width"], (got["wide"][-5:], where)  # nothing off-screen
                assert set(parts) >= {".brand", "#crumbs", ".toplink", ".avatar", ".role", "#logout"}, where
                out = parts["#logout"]
                assert out["text"] == "Log out" and out["lines"] == 1, where
                assert out["left"] >= 0 and out["right"] <= got["width"] and out["top"] >= 0, where
                assert all(parts[p]["lines"] == 1 for p in (".brand", ".toplink", ".role")), where
                for other in (".brand", "#crumbs", ".toplink", ".avatar", ".role"):
                    assert not _overlap(out, parts[other]), (other, where)
                # on the brand's row, right of it: not on a row of its own
                assert out["top"] < parts[".brand"]["bottom"] and out["left"] > parts[".brand"]["right"], (
                    where
                )
                assert not _overlap(parts[".brand"], parts[".avatar"]), where
        page.context.close()
