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
