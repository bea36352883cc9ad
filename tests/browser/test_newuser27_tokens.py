"""What newuser27 met on LabelX's admin page ("Users & tokens") in Chromium: "Create token
for me" made a token that never expires, and nothing on the page listed or revoked one. The
page lists every live token (user, the start of its id, description, created; never a secret)
with a Revoke button, through the store methods ``datahub labelx list-tokens`` and
``revoke-token`` use."""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx

from datahub.demo import labelx_admin
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in
from tests.browser.test_newuser_labelx import _wait_text


def test_the_admin_page_lists_live_tokens_and_revokes_one(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        c.visit(f"{base}/labelx/admin")
        _wait_text(c, "#tokens", "No live token.")
        # the session alone makes no token: the password again, and a wrong one is said (caller37)
        c.find("#token-form [name=description]").send_keys("nightly export")
        c.find("#token-form [name=password]").send_keys("not the admin's password")
        c.find("#token-form button[type=submit]").click()
        _wait_text(c, "#token-msg", "wrong password for 'admin'")
        c.check("caller37-token-wrong-password", page_error=f"{base}/labelx/api/tokens")
        assert (
            not c.find("#token").is_displayed()
            and c.find("#token-form [name=password]").get_attribute("value") == ""
        )
        _wait_text(c, "#tokens", "No live token.")
        c.find("#token-form [name=password]").send_keys(labelx_admin(env.config).read_text().strip())
        c.find("#token-form button[type=submit]").click()
        _wait_text(c, "#token", "lx_")
        secret = c.find("#token").text
        _wait_text(c, "#tokens", "nightly export")
        c.check("newuser27-admin-tokens")
        rows = c.find_all("#tokens tr[data-id]")
        assert len(rows) == 1
        cells = [td.text for td in rows[0].find_elements("css selector", "td")]
        assert cells[0] == "admin" and cells[2] == "nightly export" and cells[5] == "Revoke"
        # the form's default: 30 days from its creation, shown beside it (caller37)
        made = datetime.strptime(cells[3], "%Y-%m-%d %H:%M:%S UTC")
        assert datetime.strptime(cells[4], "%Y-%m-%d %H:%M:%S UTC") - made == timedelta(days=30)
        token_id = rows[0].get_attribute("data-id")
        assert cells[1] == token_id[:12] + "…" and len(token_id) == 64
        assert secret not in c.find("#tokens").text  # never the secret
        auth = {"Authorization": f"Bearer {secret}"}
        assert httpx.get(f"{base}/labelx/api/me", headers=auth, timeout=60).status_code == 200

        # a token made with it: listed as such, and revoked with it (caller44)
        child = httpx.post(
            f"{base}/labelx/api/tokens",
            json={"description": "made by the export", "expires_days": 7},
            headers=auth,
            timeout=60,
        )
        assert child.status_code == 201, child.text
        child_auth = {"Authorization": f"Bearer {child.json()['token']}"}
        c.visit(f"{base}/labelx/admin")
        _wait_text(c, "#tokens", "made by the export")
        [row] = [r for r in c.find_all("#tokens tr[data-id]") if "made by the export" in r.text]
        assert f"made with {token_id[:12]}…" in row.text
        c.check("caller44-admin-token-made-with")

        c.find(f'#tokens button[data-id="{token_id}"]').click()
        _wait_text(c, "#tokens-msg", f"Revoked admin's token {token_id[:12]}… and the tokens made with it.")
        _wait_text(c, "#tokens", "No live token.")
        c.check("newuser27-admin-token-revoked")
        assert httpx.get(f"{base}/labelx/api/me", headers=auth, timeout=60).status_code == 401
        assert httpx.get(f"{base}/labelx/api/me", headers=child_auth, timeout=60).status_code == 401
