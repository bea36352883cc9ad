"""Whether a sign-in or sign-out form was sent from a page of this site: one rule, both UIs.

Why the ``Origin`` header and not only the forms' double-submit token: SameSite and the
double-submit cookie keep out other *sites*, but a page of the same site on another origin
(another port of the same host, such as a notebook or a dev server on 127.0.0.1; a sibling
subdomain) is same-site, so the browser sends SameSite=Strict cookies with its form posts, and
such a page can also write cookies this app reads (cookies are not kept apart by port). It
plants a login-form cookie of its choosing, posts the form with that value and its own
account's name and password, and the person's browser is then signed in to the attacker's
account (login CSRF): what they label is the attacker's (caller34). Every browser names the
sending page's origin in ``Origin`` on a POST; it must name this host. A request without it
(a script, an old browser) is left to the double-submit token.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request

FOREIGN_FORM = "this form was sent from another site; open the page again and retry"


def sent_from_elsewhere(request: Request) -> bool:
    """True when the request's ``Origin`` names another origin than the host it was sent to
    (``null``, an opaque origin, is another one)."""
    origin = request.headers.get("origin")
    if origin is None:
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return True
    return netloc.lower() != request.headers.get("host", "").lower()
