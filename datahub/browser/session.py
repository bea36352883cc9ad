"""Who is browsing: exactly the API's callers, with a cookie a browser can carry.

The browser has no accounts of its own: a person signs in with an API token (``datahub token
create``), which the login form checks against the catalog's token table. The sign-in is a
browser session kept server-side, in the catalog beside the tokens (``put_browser_session``):
the cookie holds a random id, the catalog only its SHA-256, the token's hash it stands for and
its end (``SESSION_SECONDS``). "Sign out" deletes it, so a copy of the cookie (a shared
machine's profile, a proxy log) stops working at once, and the person's scripts keep their
token. Every request looks the session and its token up again, so ``datahub token revoke``
ends the browser sessions of that token at once too. Before caller36 the cookie held the API
token itself: sign-out only deleted it in that browser, and a copy worked until the token was
revoked. Such a cookie is refused (the person signs in again).

The cookie is HttpOnly and SameSite=Strict, so page scripts never see it and no other site can
send it; Secure over https, or when signed in from an https page behind a TLS proxy, and then
named ``__Host-datahub_session_<instance>`` (``datahub.web.cookies``), which no page on another
port or http address of the host can write. ``<instance>`` is the catalog's (``session_cookie``),
so two ``datahub serve`` of two catalogs on one host keep their sign-ins apart (caller73). Scripts may send ``Authorization: Bearer`` instead. In
local mode every caller is the API's ``local`` admin and there is no login. The API itself
never reads the cookie (a session cannot be turned into an API token: there is no API route
that makes one), so it needs no CSRF defence; the browser's only writes are login and logout,
which check a double-submit token and the Origin header.

LabelX keeps its sessions the same way (``labelx.accounts``: the id's hash, whose credential,
until when), in its own store: its accounts are not the catalog's principals.
"""

from __future__ import annotations

import secrets
import time

from fastapi import Request, Response

from datahub.api.access import LOCAL, Principal
from datahub.api.deps import Services
from datahub.api.tokens import TOKEN_COMMAND, TOKEN_PREFIX, hash_token, lookup_token
from datahub.catalog.model import BrowserSession
from datahub.errors import AccessDenied, Unauthenticated
from datahub.web.cookies import read_cookie, secure_cookie, set_cookie
from datahub.web.forms import FOREIGN_FORM, sent_from_elsewhere

SESSION_COOKIE = "datahub_session"  # + "_<instance>": the catalog's (``session_cookie``)
LOGIN_CSRF_COOKIE = "datahub_login_csrf"  # + "_<instance>", as the session's
SESSION_SECONDS = 12 * 3600
MAX_TOKEN_CHARS = 256
clock = time.time  # when sessions end is read from (tests move it)


def caller(request: Request, services: Services) -> Principal:
    """The API's principal for this request; Unauthenticated when nobody signed in."""
    known = getattr(request.state, "principal", None)
    if known is not None:
        return known
    if services.config.api.local_mode:
        principal = LOCAL
    else:
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            principal = _principal(services, bearer.strip())
        else:
            principal = _signed_in(services, cookie(request, session_cookie(services)))
    request.state.principal = principal
    return principal


# Why a sign-in is refused, by the code the form's redirect names (``/login?error=invalid``):
# the sign-in page says only these, never a text of its address. Before, it showed whatever
# ``?error=`` said in the alert beside the token field, so a link to the real server carried a
# phisher's words ("paste a new admin token at ...") to where a person pastes a token (review19b).
SIGN_IN_ERRORS = {
    "missing": f"sign in with an API token first (a token: {TOKEN_COMMAND})",
    "not_a_token": f"that is not a datahub API token (they start with {TOKEN_PREFIX!r})",
    "invalid": f"invalid or revoked token: create a new one with {TOKEN_COMMAND}",
    "ended": (
        "your sign-in ended (signed out, 12 hours passed, its API token was revoked, or it was made "
        "before this server kept sign-ins): sign in again"
    ),
}


def _signed_in(services: Services, session_id: str) -> Principal:
    """The principal of a browser session's cookie, while the session and its token last."""
    if not session_id:
        raise Unauthenticated(SIGN_IN_ERRORS["missing"], reason="missing")
    store = services.catalog.store
    # a cookie from before caller36 holds the API token itself (dh_...): never a session's id
    found = None
    if len(session_id) <= MAX_TOKEN_CHARS and not session_id.startswith(TOKEN_PREFIX):
        found = store.get_browser_session(hash_token(session_id))
    info = store.get_token(found.token_hash) if found and found.expires_at >= clock() else None
    if info is None:
        raise Unauthenticated(SIGN_IN_ERRORS["ended"], reason="ended")
    return Principal(info.principal, info.is_admin)


def sign_in(services: Services, token: str) -> str:
    """Check ``token`` (``check_token``) and open a browser session for it; returns the id the
    cookie holds (the catalog keeps its hash only)."""
    check_token(services, token)
    session_id, now = secrets.token_urlsafe(32), clock()
    opened = BrowserSession(hash_token(session_id), hash_token(token.strip()), now + SESSION_SECONDS)
    services.catalog.store.put_browser_session(opened, now)
    return session_id


def sign_out(services: Services, session_id: str) -> None:
    """End the session ``session_id`` names (nothing when it names none)."""
    if session_id and len(session_id) <= MAX_TOKEN_CHARS:
        services.catalog.store.delete_browser_session(hash_token(session_id))


def _principal(services: Services, token: str) -> Principal:
    if not token:
        raise Unauthenticated(SIGN_IN_ERRORS["missing"], reason="missing")
    info = lookup_token(services.catalog.store, token) if len(token) <= MAX_TOKEN_CHARS else None
    if info is None:
        raise Unauthenticated(SIGN_IN_ERRORS["invalid"], reason="invalid")
    return Principal(info.principal, info.is_admin)


def check_token(services: Services, token: str) -> Principal:
    """The login form's check: the same lookup every later request makes. A refusal's
    ``details["reason"]`` is its code in ``SIGN_IN_ERRORS``."""
    token = token.strip()
    if not token.startswith(TOKEN_PREFIX):
        raise Unauthenticated(SIGN_IN_ERRORS["not_a_token"], reason="not_a_token")
    return _principal(services, token)


def session_cookie(services: Services) -> str:
    """The session cookie's name for this server's catalog: ``datahub_session_<instance>``
    (``CatalogStore.instance_id``).

    Why not one name for all (caller73): a browser keeps cookies by host, not port, and one
    cookie per name and path. Two ``datahub serve`` on one host (two homes, two ports) both set
    ``datahub_session``: signing in to B replaced A's cookie, so A asked the person to sign in
    again, and signing out of B deleted the cookie A read. LabelX names its cookies per
    labelx.db the same way (``labelx.auth.session_cookie``)."""
    return f"{SESSION_COOKIE}_{services.catalog.store.instance_id()}"


def login_csrf_cookie(services: Services) -> str:
    """The sign-in form's double-submit cookie's name: this catalog's own, as the session's."""
    return f"{LOGIN_CSRF_COOKIE}_{services.catalog.store.instance_id()}"


def new_login_csrf(services: Services) -> str:
    """A sign-in form's token: it starts with the catalog's instance id and a dot, so a token
    another server of the host set (planted under this one's cookie name) is never taken
    (``form_token_ok``), as LabelX's form tokens (caller72)."""
    return f"{services.catalog.store.instance_id()}.{secrets.token_urlsafe(24)}"


def form_token_ok(services: Services, token: str) -> bool:
    """Whether ``token`` is a form token this catalog's servers made (``new_login_csrf``)."""
    return bool(token) and token.startswith(services.catalog.store.instance_id() + ".")


def check_form(request: Request, sent: str) -> None:
    """A login or logout form must come from this site: the Origin header (sent by every
    browser on a POST) names this host, and the form echoes the cookie's double-submit token,
    which is this catalog's (``new_login_csrf``)."""
    if sent_from_elsewhere(request):
        raise AccessDenied(FOREIGN_FORM)
    services = request.app.state.services
    held = cookie(request, login_csrf_cookie(services))
    fits = form_token_ok(services, held) and bool(sent)
    if not fits or not secrets.compare_digest(held.encode(), sent.encode()):
        raise AccessDenied("the form expired; open the page again and retry")


def secure(request: Request) -> bool:
    """Configured (``api.secure_cookies``), over https, or signed in from an https page behind a
    TLS proxy (``datahub.web.cookies``)."""
    return secure_cookie(request, always=always_secure(request))


def always_secure(request: Request) -> bool:
    """``api.secure_cookies`` (``datahub serve --secure-cookies``): every cookie Secure.

    Why a setting and not only the sign-in's ``Origin`` (review22b): behind a TLS proxy the app
    sees plain http, and a request with no ``Origin`` (a GET, the login form's cookie; a browser
    or extension that leaves it out of a POST) set its cookie without ``Secure``, so the
    person's browser sent it over any ``http://`` address of the host. The operator who put the
    proxy there knows the pages are https; the app cannot tell (there is no trusted-proxy
    setting, and ``X-Forwarded-Proto`` from anyone else is not believed)."""
    return bool(request.app.state.services.config.api.secure_cookies)


def cookie(request: Request, name: str) -> str:
    """The browser's cookie ``name``, read under the name it is set with (``read_cookie``)."""
    return read_cookie(request, name, always=always_secure(request))


def put_cookie(
    response: Response, request: Request, name: str, value: str, max_age: int | None = None
) -> None:
    """Set the browser's cookie ``name`` (``set_cookie``): Secure when ``secure`` says so."""
    set_cookie(response, request, name, value, always=always_secure(request), max_age=max_age)
