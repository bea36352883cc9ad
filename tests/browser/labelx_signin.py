"""Signing in to LabelX in headless Chromium, as a new user of ``make run`` does it: one helper
for every browser test that signs in (the same steps were written out in each file)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from datahub.cli.serve_cmd import build_app
from datahub.demo import labelx_admin
from tests.browser.chrome import Chrome
from tests.browser.conftest import Env, serving


def type_sign_in(c: Chrome, name: str, password: str) -> None:
    """Type ``name`` and ``password`` into the login page on screen, press "Sign in" and wait
    until it lets the user in (the page leaves ``/login``)."""
    c.find("#name").send_keys(name)
    c.find("#password").send_keys(password)
    c.find("#login").click()
    c.wait_for_url(lambda url: not url.endswith("/login"))


def drop_labelx_session(c: Chrome) -> None:
    """Delete LabelX's session cookie from the browser, as its end (12 h) does: named
    ``labelx_session_<instance>`` since caller44 (each labelx.db its own)."""
    for cookie in c.driver.get_cookies():
        if cookie["name"].removeprefix("__Host-").startswith("labelx_session_"):
            c.driver.delete_cookie(cookie["name"])


def sign_out_and_in(c: Chrome, name: str, password: str) -> None:
    """Press "Sign out" on a LabelX page, then sign in as ``name`` on the login page it leads to."""
    c.find("#logout").click()
    c.wait_for_url(lambda url: url.endswith("/login"))
    type_sign_in(c, name, password)


@contextmanager
def signed_in(c: Chrome, env: Env, shot: str | None = None, *, cli: str | None = None) -> Iterator[str]:
    """``make run``'s LabelX over ``env`` (its first admin made as the demo makes it), with that
    admin signed in through the login page (checked as ``shot``); yields the server's URL.
    ``cli``: the command the dashboard names, as ``make run`` sets it (datahub.demo.serve_api)."""
    env.config.home_path.mkdir(parents=True, exist_ok=True)  # make run's "prepare" step
    password = labelx_admin(env.config).read_text().strip()
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    if cli is not None:
        next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx").state.labelx.cli = cli
    try:
        with serving(app) as base:
            c.visit(f"{base}/labelx/login", shot)
            assert "labelx-admin-password" in c.find("#demo-password").text
            type_sign_in(c, "admin", password)
            yield base
    finally:
        cache.close()
