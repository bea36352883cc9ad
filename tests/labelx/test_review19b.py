"""review19b: LabelX pages show invisible format characters as ``⟨U+202E⟩``, as the browser does.

LabelX's pages write the data they show themselves (``labelx/static``, from the JSON API),
so the templates' ``shown`` (``datahub.web.render``) never sees it. A record's label is any
text its dataset's writers chose, and keys stored before the bidi rule stay (issue 24 item 4):
the annotation page showed a label ``\\u202etac`` as "cat" and a key ``img/0000\\u202egpj.jpg``
as "img/0000jpg.jpg" to an annotator deciding what to label. In headless Chromium.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import labelx.auth
from datahub.catalog import Patch, Put, Record
from datahub.errors import Unauthenticated
from datahub.validation import INVISIBLE_CHARS
from labelx.accounts import DISABLED
from tests.labelx.conftest import PASSWORD, Env, Session, make_project, ok
from tests.labelx.test_browser import browser, login, no_page_errors, server  # noqa: F401 (fixtures)

LABEL = "\u202etac"  # shows as "cat"
LEGACY = "img/0000\u202egpj.jpg"  # stored before the rule: shows as "img/0000jpg.jpg"


def test_the_annotation_page_shows_invisible_format_characters(app, env: Env, server, browser) -> None:  # noqa: F811
    first = env.catalog.get_record("pets", 1, "img/0000.jpg")
    env.catalog.commit("pets", [Patch("img/0000.jpg", labels={"class": LABEL})])
    # written straight to the store, as a datahub from before the rule did (the same picture)
    env.catalog.store.commit("pets", 2, [Put(Record(LEGACY, first.url, first.etag, first.size))])
    admin = Session(app, "admin")
    make_project(admin, version=3)
    task = ok(Session(app, "alice").get("/api/projects/1/tasks"))[0]["id"]
    page = login(browser, server, "alice")
    page.goto(f"{server}/tasks/{task}")
    page.wait_for_selector("#items li:nth-child(2)")
    assert page.locator("#item-key").inner_text() == "img/0000.jpg"
    assert "⟨U+202E⟩tac" in page.locator("#existing").inner_text()
    assert page.locator("#items li:nth-child(2)").inner_text() == "2. img/0000⟨U+202E⟩gpj.jpg"
    assert page.locator("#items li:nth-child(2)").get_attribute("title") == "img/0000⟨U+202E⟩gpj.jpg"
    invisible = re.compile(f"[{INVISIBLE_CHARS}]")
    assert not invisible.search(page.locator("body").inner_text())


def test_the_pages_name_the_characters_the_catalog_refuses() -> None:
    """One list: labelx/static/common.js writes out exactly what datahub.validation calls invisible."""
    script = (Path(__file__).parents[2] / "labelx" / "static" / "common.js").read_text()
    found = re.search(r"const INVISIBLE = /\[([^\]]+)\]/g;", script)
    assert found, "common.js has no INVISIBLE class"
    js = found[1].encode().decode("unicode_escape")
    assert js == INVISIBLE_CHARS


def test_a_login_racing_a_password_change_opens_no_session(app, monkeypatch) -> None:
    """``datahub labelx set-password`` / ``disable-user`` end every session in the transaction
    that replaces the hash. A login checked the old password, then wrote its session: a
    replacement in between (a person let go, logging in again and again while the operator
    changes the password) left that login a session for 12 h. The session is now written only
    while the hash it was checked against is still the account's. The operator's change is put
    exactly between the check and the write (the race, made certain)."""
    lx = app.state.labelx
    checked = labelx.auth.verify_password

    def check_then_disable(password: str, stored: str) -> bool:
        ok = checked(password, stored)
        lx.store.set_password("alice", DISABLED)  # the operator, at the worst moment
        return ok

    monkeypatch.setattr(labelx.auth, "verify_password", check_then_disable)
    with pytest.raises(Unauthenticated):
        lx.auth.login("alice", PASSWORD)
    alice = lx.store.user_by_name("alice").id
    assert (
        lx.store._conn().execute("SELECT COUNT(*) FROM sessions WHERE user_id=?", (alice,)).fetchone()[0] == 0
    )


def test_a_token_asked_for_racing_a_password_change_is_not_made(app) -> None:
    """``POST /api/tokens`` authenticates, then writes a token that never expires. A password
    change between the two (its transaction ends the session that asked) left the request a
    new token: the account's access outlived the change for good. Replayed in that order:
    the caller is authenticated, the operator disables the account, the token is written."""
    lx = app.state.labelx
    session_id, _ = lx.auth.login("bob", PASSWORD)
    who = lx.auth.from_session(session_id)
    assert who is not None
    lx.store.set_password("bob", DISABLED)
    with pytest.raises(Unauthenticated):
        lx.auth.new_token(who.user, "made while disabled", proof=who)
    bob = lx.store.user_by_name("bob").id
    assert lx.store._conn().execute("SELECT COUNT(*) FROM tokens WHERE user_id=?", (bob,)).fetchone()[0] == 0
