"""A per-user picture's answer: the browser may keep it, and asks the server before each use.

Why: the dataset browser's thumbnails and charts and LabelX's item images were sent with
``private, max-age=...`` (up to a week): the browser then showed them from its HTTP cache
without a request, so after "Sign out", or after the person's role on the dataset was
removed, the next person on a shared machine still saw a private dataset's pictures
(caller74). ``private, no-cache`` lets the browser keep the bytes but makes it ask each
time; the route checks who asks first (as for any request), and a request whose
``If-None-Match`` names the strong ETag of what it would send is a 304 without a body: the
cheap answer a kept picture costs, with the access check still in front of it.

Static assets (``/static``, the favicon, the API docs' scripts) are the same for everybody
and keep their long caching.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

#: per-user content: kept by the browser only (``private``), used only after the server said
#: yes again (``no-cache``: revalidate every time)
PRIVATE_REVALIDATE = "private, no-cache"


def strong_etag(*parts: object) -> str:
    """A strong ETag (quoted) for the bytes that ``parts`` determine: an object's URL, its etag
    and size and the preview's kind name the same JPEG every time."""
    text = "\0".join(str(p) for p in parts)
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def _matches(request: Request, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (or ``*``); a weak ``W/`` form matches too, as
    RFC 9110's weak comparison for If-None-Match says."""
    header = request.headers.get("if-none-match", "")
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def private_answer(
    request: Request, etag: str, body: Callable[[], bytes], media_type: str, **headers: str
) -> Response:
    """``body()``'s bytes as ``media_type`` with ``Cache-Control: private, no-cache`` and
    ``etag``, or a 304 without calling ``body`` when the request's ``If-None-Match`` names it.

    Call it only after the route's access check: a 304 tells the caller the bytes it holds are
    still what it may see."""
    kept = {"Cache-Control": PRIVATE_REVALIDATE, "ETag": etag, **headers}
    if _matches(request, etag):
        return Response(status_code=304, headers=kept)
    return Response(body(), media_type=media_type, headers=kept)
