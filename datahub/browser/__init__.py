"""The dataset browser: HTML pages at the root of ``datahub serve`` (docs/browser.md).

``mount_browser(app, ...)`` adds the pages, their static files and the thumbnail source to a
``datahub.api.create_app`` app; the API stays under ``/v1`` and LabelX under ``/labelx/``.
It lives above ``datahub.api`` (it uses the API's services, tokens and access rules) and is
mounted by the composition root (``datahub serve``, ``make run``), like LabelX.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from datahub.browser.pages import Browser, error_page, router
from datahub.web import page_headers
from datahub.web.images import ImageSource

STATIC = Path(__file__).parent / "static"

# /datasets/NAME/v3[/FOLDER/KEY], /datasets/NAME@v3[/...]: a version addressed as the CLI
# (NAME@v3) and a mount (MNT/NAME/v3/KEY) write it, with no ``versions/`` in between
_VERSION_GUESS = re.compile(r"/datasets/([^/@]+)[/@](v?[0-9]+|latest)(?:/(.*))?")


def version_address(path: str) -> str | None:
    """The browser's address of the version (and folder or record) ``path`` names the way the
    CLI and a mount do, or None. Why: ``/datasets/pets/v1`` and ``/datasets/pets/v1/train/`` were
    "no page at …: start from the datasets at /", the way every other mistyped address is,
    though what was meant is plain (newuser36)."""
    match = _VERSION_GUESS.fullmatch(path)
    if match is None:
        return None
    name, ref, rest = match.groups()
    address = f"/datasets/{quote(name)}/versions/{quote(ref)}"
    return f"{address}?{urlencode({'prefix': rest})}" if rest else address


def mount_browser(app: FastAPI, *, cache: Any = None, stores: Any = None, labelx: bool = False) -> Browser:
    """Serve the browser from ``app`` (built by ``create_app``); thumbnails are read through
    ``cache`` (or straight from ``stores`` without one) and kept under ``<home>/browser``.
    ``labelx``: LabelX is served under ``/labelx/`` too, so the pages link to it."""
    services = app.state.services
    images = ImageSource(services.config.home_path / "browser" / "previews", cache=cache, stores=stores)
    app.state.browser = browser = Browser(services, images, labelx=labelx)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="browser-static")
    api_errors = app.exception_handlers[StarletteHTTPException]

    async def not_found(request: Request, exc: StarletteHTTPException) -> Response:
        """A page nobody serves, asked for by a browser, is the browser's error page; a script
        (no ``text/html`` in Accept) and every path under ``/v1/`` keep the API's JSON."""
        wants_page = "text/html" in request.headers.get("accept", "")
        if exc.status_code == 404 and wants_page and not request.url.path.startswith("/v1/"):
            address = version_address(request.url.path)
            if address is not None:  # the version's page checks the name, the ref and access
                return RedirectResponse(address, 303)
            response = error_page(
                request, 404, "not_found", f"no page at {request.url.path}: start from the datasets at /"
            )
            response.headers.update(page_headers())
            return response
        return await api_errors(request, exc)

    app.add_exception_handler(StarletteHTTPException, not_found)
    return browser


__all__ = ["Browser", "mount_browser"]
