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
