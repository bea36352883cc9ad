"""Whether a sign-in cookie must be ``Secure``: the one rule of both web UIs' sign-in forms.

Why not only the scheme the app sees: ``datahub serve`` behind a TLS-terminating proxy on
another host sees plain http (uvicorn believes ``X-Forwarded-Proto`` only from 127.0.0.1), so
the dataset browser's session cookie, the API token itself, and LabelX's were set without
``Secure``, and the person's browser sent them in the clear to any ``http://`` address of the
host (a link, a name typed without HSTS, a redirect injected on the network), though that
person used https only (review22b). A sign-in is a POST from the person's browser, which names
the page it was sent from in ``Origin``; https there means the browser reaches this site over
https, where a Secure cookie is kept and sent. Plain http on both sides (the in-cluster
service, a laptop) stays without it: a browser drops a Secure cookie set over http.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response


def secure_cookie(request: Request, *, always: bool = False) -> bool:
    """``Secure`` for a cookie set in answer to ``request``: configured (``always``), over
    https, or sent from an https page (its ``Origin``)."""
    if always or request.url.scheme == "https":
        return True
    origin = request.headers.get("origin", "")
    return urlsplit(origin).scheme == "https" if origin else False


def cookie_values(request: Request, name: str) -> list[str]:
    """Every value the request's ``Cookie`` header gives ``name``, in the order sent.

    Why not ``request.cookies``: it keeps the last one only. A page of the same site on
    another port of the host may write cookies this app reads (a cookie's scope is the host,
    not the port); one it wrote with the session cookie's name and a shorter ``Path`` is sent
    after the app's own, so the app read the attacker's session instead of the person's
    (caller34). Two different values are a cookie someone else wrote, never the app's own."""
    values = []
    for chunk in request.headers.get("cookie", "").split(";"):
        key, sep, value = chunk.partition("=")
        if sep and key.strip() == name:
            values.append(value.strip())
    return values


def cookie_paths(path: str) -> list[str]:
    """Every ``Path`` a cookie sent with a request for ``path`` may have been set with (RFC 6265
    path-match): the way to expire one the app did not set, whose ``Path`` it cannot know."""
    paths = ["/"]
    parts = [p for p in path.split("/") if p]
    for n in range(1, len(parts) + 1):
        prefix = "/" + "/".join(parts[:n])
        paths += [prefix, prefix + "/"]
    return paths


# --- the __Host- prefix (caller36) ---------------------------------------------------------------
#: A browser keeps a cookie of this name only if it is Secure, has ``Path=/`` and no ``Domain``,
#: and was set by an https page of this very host (RFC 6265bis). Why: a page of the host on another
#: port (cookies are scoped by host, not port) or of a sibling domain wrote a plain
#: ``labelx_session`` of its own on a signed-out person, who then worked in the writer's account.
#: Over plain http no browser sets a Secure cookie, so there the names stay unprefixed.
HOST_PREFIX = "__Host-"


def cookie_name(name: str, secure: bool) -> str:
    """The name a sign-in cookie is set under: ``__Host-`` + ``name`` when it is Secure."""
    return HOST_PREFIX + name if secure else name


def held_name(request: Request, name: str, *, always: bool = False) -> str:
    """The name to read ``name``'s cookie from: the ``__Host-`` one when sent; the plain one only
    where the app may have set it (the request is not seen as https and cookies are not always
    Secure). Over https a plain cookie of that name is one a page on another port or an http
    address of the host wrote: never the app's (which sets ``__Host-`` names there)."""
    prefixed = HOST_PREFIX + name
    if prefixed in request.cookies or always or request.url.scheme == "https":
        return prefixed
    return name


def read_cookie(request: Request, name: str, *, always: bool = False) -> str:
    """The value of ``name``'s sign-in cookie under the name it is read from (``held_name``)."""
    return request.cookies.get(held_name(request, name, always=always), "")


def set_cookie(
    response: Response,
    request: Request,
    name: str,
    value: str,
    *,
    path: str = "/",
    always: bool = False,
    max_age: int | None = None,
) -> None:
    """Set a sign-in cookie: HttpOnly, SameSite=Strict; when Secure (``secure_cookie``) under
    ``__Host-`` + ``name`` at ``Path=/`` (the prefix allows no other path), else at ``path``."""
    secure = secure_cookie(request, always=always)
    response.set_cookie(
        cookie_name(name, secure),
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/" if secure else path,
    )


def delete_cookie(response: Response, name: str, *, path: str = "/") -> None:
    """Expire ``name``'s cookie under both names it may have: plain at ``path``, ``__Host-`` at
    ``/`` (a browser takes the expiry of a ``__Host-`` cookie only with its attributes)."""
    response.delete_cookie(name, path=path)
    response.delete_cookie(HOST_PREFIX + name, path="/", secure=True, httponly=True, samesite="strict")
