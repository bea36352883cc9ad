"""caller36: over https, both UIs' sign-in cookies are ``__Host-`` cookies no other port can plant.

A page on another port of the host (cookies are scoped by host, not port) wrote a LabelX session
of its own (``labelx_session`` with ``Path=/labelx``) on a signed-out person: LabelX read it, and
the person worked in the writer's account (caller34 refused two session cookies, not one planted
on a browser that had none). A ``__Host-`` cookie is kept only if an https page of this host set
it Secure, at ``Path=/``, without ``Domain``: over https both UIs now set and read only those. Under
``datahub serve`` LabelX's cookies then have ``Path=/`` too (the prefix allows no other) and are
sent to the dataset browser's pages, which read only ``datahub_*``: names keep them apart.
Driven in headless Chromium over https (a self-signed certificate for 127.0.0.1, its errors
ignored through the DevTools protocol), the attacker's page served over http on another port.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.browser import session
from datahub.cli.serve_cmd import build_app
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env, serving, token_sign_in
from tests.browser.labelx_signin import type_sign_in
from tests.browser.test_caller34_login_csrf import attacker_site
from tests.labelx.conftest import PASSWORD, add_users


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (Chromium is told to accept it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@contextmanager
def serving_https(app, tmp: Path) -> Iterator[str]:
    """The app on a loopback port over https, served by uvicorn in a thread."""
    with serving(app, self_signed(tmp)) as base:
        yield base


@pytest.fixture
def https(chrome: Chrome, env: Env, tmp_path: Path) -> Iterator[tuple[Chrome, str, object, object]]:  # noqa: F811
    """``datahub serve --auth`` (browser and LabelX) over https; Chromium accepting its
    certificate (reset after: the package shares one Chromium); alice and mallory in LabelX."""
    env.config.api.local_mode = False
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    labelx = next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx")
    add_users(labelx, alice="annotator", mallory="annotator")
    chrome.driver.execute_cdp_cmd("Security.setIgnoreCertificateErrors", {"ignore": True})
    try:
        with serving_https(app, tmp_path) as base:
            yield chrome, base, app, labelx
    finally:
        chrome.driver.execute_cdp_cmd("Security.setIgnoreCertificateErrors", {"ignore": False})
        labelx.state.labelx.store.close()
        cache.close()


def labelx_user(c: Chrome, base: str) -> str:
    """Who LabelX's API says is signed in ("" for nobody)."""
    c.driver.get(f"{base}/labelx/api/me")
    if "/login" in c.driver.current_url:  # opened as a page without a session: the login form
        return ""
    return json.loads(c.driver.execute_script("return document.body.innerText"))["name"]


def plant(c: Chrome, base: str, cookie: str, then: str) -> None:
    """An http page on another port of the host writes ``cookie`` and sends the person to ``then``."""
    page = f"""<!doctype html><html lang="en"><title>cute cats</title><script>
document.cookie = "{cookie}"; location.href = "{base}{then}";
</script></html>"""
    with attacker_site(page) as evil:
        assert evil.split(":")[1] == base.split(":")[1]  # same host, another port
        c.driver.get(evil)
        c.until(
            lambda d: (
                d.current_url.startswith(base)
                and d.execute_script("return document.readyState") == "complete"
            )
        )


def cookies(c: Chrome) -> dict[str, dict]:
    return {k["name"]: k for k in c.driver.get_cookies()}


def test_a_labelx_session_planted_on_a_signed_out_person_does_not_sign_them_in(https) -> None:
    c, base, _, labelx = https
    mallorys, _ = labelx.state.labelx.auth.login("mallory", PASSWORD)
    plant(c, base, f"{labelx.state.labelx.auth.session_cookie}={mallorys}; path=/labelx", "/labelx/")
    assert "/login" in c.driver.current_url, "the planted session opened LabelX"
    assert labelx_user(c, base) != "mallory"
    c.driver.get(f"{base}/labelx/login")
    type_sign_in(c, "alice", PASSWORD)  # the person signs in: their own session wins
    assert labelx_user(c, base) == "alice"


def test_both_uis_keep_host_cookies_apart_and_sign_out_alone(https, env: Env) -> None:
    """Signed in to both over https: ``__Host-`` cookies at ``/`` for each, none plain; a sign-out
    of the dataset browser leaves LabelX signed in; a plain session cookie written by another
    port afterwards opens neither."""
    c, base, app, labelx = https
    lx_session = labelx.state.labelx.auth.session_cookie  # labelx_session_<instance> (caller44)
    token = issue_token(env.catalog.store, "alice")[0]
    c.driver.get(f"{base}/login")
    token_sign_in(c, token)
    c.driver.get(f"{base}/labelx/login")
    type_sign_in(c, "alice", PASSWORD)
    held = cookies(c)
    services = app.state.browser.services  # datahub_*_<instance> (caller73)
    dh_session, dh_csrf = session.session_cookie(services), session.login_csrf_cookie(services)
    for name in (dh_session, dh_csrf, lx_session):
        assert name not in held, f"a plain {name} over https"
        kept = held[f"__Host-{name}"]
        assert kept["secure"] and kept["path"] == "/" and kept["httpOnly"] and "domain" in kept
    c.driver.get(f"{base}/")
    c.find("form[action='/logout'] button").click()
    c.wait_for_url(lambda url: url.endswith("/login"))
    assert f"__Host-{dh_session}" not in cookies(c) and f"__Host-{lx_session}" in cookies(c)
    assert labelx_user(c, base) == "alice"
    # mallory's own dataset browser session, as she can open one anywhere
    mallorys = session.sign_in(app.state.browser.services, issue_token(env.catalog.store, "mallory")[0])
    plant(c, base, f"{dh_session}={mallorys}; path=/", "/")
    assert "/login" in c.driver.current_url, "the planted dataset browser session opened the browser"
