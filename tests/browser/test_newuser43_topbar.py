"""The dataset browser's top bar for a signed-in reader in a phone's window and a laptop's, in
headless Chromium (newuser43, as LabelX's ``tests/labelx/test_newuser43_topbar.py``).

Checked by the elements' rectangles at 360, 400, 420 and 1360 px, for a short name and a long
one: "Sign out" on one line, on the brand's row, inside the window, overlapping no other part
of the bar, and no page wider than the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from tests.browser.chrome import chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env, browser_app, pets_env, serving, token_sign_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = "a.reader.whose.name.is.as.long.as.a.token.name.goes.for.layout"
DATASET = "a-dataset-with-a-rather-long-name-for-layout-checks-of-browser"  # long crumbs too

GEOMETRY = """
  const box = e => { const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const lines = e => { const r = document.createRange(); r.selectNodeContents(e);
    return new Set(Array.from(r.getClientRects(), c => Math.round(c.top))).size; };
  const found = {};
  for (const s of ['.brand', '.crumbs', '.toplink', '.who', 'form.inline button']) {
    const e = document.querySelector('.topbar ' + s);
    if (e && e.getBoundingClientRect().width) found[s] = {...box(e), lines: lines(e), text: e.textContent}; }
  return {width: innerWidth, page: document.documentElement.scrollWidth, parts: found};"""


@pytest.fixture
def auth_env(tmp_path: Path) -> Iterator[Env]:
    with pets_env(tmp_path, local_mode=False, in_ram=True) as e:
        yield e


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


@pytest.mark.parametrize("who", ["alice", LONG])
def test_sign_out_stays_whole_on_the_first_row_at_every_width(chrome, auth_env, who) -> None:  # noqa: F811
    c = chrome
    secret = issue_token(auth_env.catalog.store, who)[0]
    auth_env.catalog.derive("pets", 2, "labels.class=dog", to_dataset=DATASET, owner=who)
    with browser_app(auth_env) as app, serving(app) as base:
        c.visit(f"{base}/login")
        token_sign_in(c, secret)
        for width in (360, 400, 420, 1360):
            for path in ("/", f"/datasets/{DATASET}", f"/datasets/{DATASET}/versions/1"):
                c.driver.set_window_size(width, 800)
                c.visit(base + path, axe=False)
                c.save_view(f"newuser43-topbar-{width}-{who[:5]}-{len(path)}")
                got = c.driver.execute_script(GEOMETRY)
                parts, where = got["parts"], (width, who[:5], path, got)
                assert got["page"] <= got["width"], where
                assert set(parts) == {".brand", ".crumbs", ".toplink", ".who", "form.inline button"}, where
                out = parts["form.inline button"]
                assert out["text"] == "Sign out" and out["lines"] == 1, where
                assert out["left"] >= 0 and out["right"] <= got["width"] and out["top"] >= 0, where
                for other in (".brand", ".crumbs", ".toplink", ".who"):
                    assert not _overlap(out, parts[other]), (other, where)
                assert out["top"] < parts[".brand"]["bottom"] and out["left"] > parts[".brand"]["right"], (
                    where
                )
                assert not _overlap(parts[".brand"], parts[".who"]), where
