"""Who is browsing: exactly the API's callers, with a cookie a browser can carry.

The browser has no accounts of its own: a person signs in with an API token (``datahub token
create``), which the login form checks against the catalog's token table and keeps in an
HttpOnly, SameSite=Strict cookie (Secure over https, or when signed in from an https page
behind a TLS proxy: ``datahub.web.cookies``), so page scripts never see it and no other site
can send it. Every request looks the token up again, so ``datahub token revoke``
ends a browser session at once. Scripts may send ``Authorization: Bearer`` instead. In
local mode every caller is the API's ``local`` admin and there is no login. The API itself
never reads the cookie, so it needs no CSRF defence; the browser's only writes are login and
logout, which check a double-submit token and the Origin header.
"""

from __future__ import annotations

import secrets

from fastapi import Request

from datahub.api.access import LOCAL, Principal
from datahub.api.deps import Services
from datahub.api.tokens import TOKEN_PREFIX, lookup_token
from datahub.errors import AccessDenied, Unauthenticated
from datahub.web.cookies import secure_cookie
from datahub.web.forms import FOREIGN_FORM, sent_from_elsewhere

SESSION_COOKIE = "datahub_session"
LOGIN_CSRF_COOKIE = "datahub_login_csrf"
SESSION_SECONDS = 12 * 3600
MAX_TOKEN_CHARS = 256


def caller(request: Request, services: Services) -> Principal:
    """The API's principal for this request; Unauthenticated when nobody signed in."""
    known = getattr(request.state, "principal", None)
    if known is not None:
        return known
    if services.config.api.local_mode:
        principal = LOCAL
    else:
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        token = bearer.strip() if scheme.lower() == "bearer" else request.cookies.get(SESSION_COOKIE, "")
        principal = _principal(services, token)
    request.state.principal = principal
    return principal


# Why a sign-in is refused, by the code the form's redirect names (``/login?error=invalid``):
# the sign-in page says only these, never a text of its address. Before, it showed whatever
# ``?error=`` said in the alert beside the token field, so a link to the real server carried a
# phisher's words ("paste a new admin token at ...") to where a person pastes a token (review19b).
SIGN_IN_ERRORS = {
    "missing": "sign in with an API token first (datahub token create)",
    "not_a_token": f"that is not a datahub API token (they start with {TOKEN_PREFIX!r})",
    "invalid": "invalid or revoked token: create a new one with 'datahub token create'",
}


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


def new_login_csrf() -> str:
    return secrets.token_urlsafe(24)


def check_form(request: Request, sent: str) -> None:
    """A login or logout form must come from this site: the Origin header (sent by every
    browser on a POST) names this host, and the form echoes the cookie's double-submit token."""
    if sent_from_elsewhere(request):
        raise AccessDenied(FOREIGN_FORM)
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not cookie or not sent or not secrets.compare_digest(cookie, sent):
        raise AccessDenied("the form expired; open the page again and retry")


def secure(request: Request) -> bool:
    """Over https, or signed in from an https page behind a TLS proxy (``datahub.web.cookies``)."""
    return secure_cookie(request)
