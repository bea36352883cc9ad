"""The dataset browser: HTML pages at the root of ``datahub serve`` (docs/browser.md).

``mount_browser(app, ...)`` adds the pages, their static files and the thumbnail source to a
``datahub.api.create_app`` app; the API stays under ``/v1`` and LabelX under ``/labelx/``.
It lives above ``datahub.api`` (it uses the API's services, tokens and access rules) and is
mounted by the composition root (``datahub serve``, ``make run``), like LabelX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from datahub.browser.pages import Browser, error_page, router
from datahub.web import page_headers
from datahub.web.images import ImageSource

STATIC = Path(__file__).parent / "static"


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
            response = error_page(
                request, 404, "not_found", f"no page at {request.url.path}: start from the datasets at /"
            )
            response.headers.update(page_headers())
            return response
        return await api_errors(request, exc)

    app.add_exception_handler(StarletteHTTPException, not_found)
    return browser


__all__ = ["Browser", "mount_browser"]
