"""The API reference (Swagger UI) served from the installation, under the shared CSP.

FastAPI's own ``/docs`` loads Swagger UI's script and style from a public CDN, so on a
machine without internet the page is blank, and it carries no Content-Security-Policy.
Here the page is rendered like every other page (``Pages`` over ``_base.html``: no inline
script or style), Swagger UI's files come from the pinned ``swagger-ui-bundle-v2`` package
(the unmodified ``swagger-ui-dist`` build), and a small script of ours starts it with the
OpenAPI URL from the page's JSON boot block. Both apps use it: the datahub API (``/docs``)
and LabelX (``/labelx/api/docs``); a mounted app's ``root_path`` prefixes every URL.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from swagger_ui_bundle import swagger_ui_path

from datahub.errors import NotFound
from datahub.web.render import Pages, security_headers

STATIC = Path(__file__).parent / "static"
SWAGGER = Path(str(swagger_ui_path))
# only these files are served (no directory listing, no source maps)
ASSETS = {
    "swagger-ui-bundle.js": SWAGGER / "swagger-ui-bundle.js",
    "swagger-ui.css": SWAGGER / "swagger-ui.css",
    "favicon-32x32.png": SWAGGER / "favicon-32x32.png",
    "apidocs.js": STATIC / "apidocs.js",
    "apidocs.css": STATIC / "apidocs.css",
}
_PAGES = Pages(Path(__file__).parent / "templates")


def add_api_docs(app: FastAPI, *, title: str, docs_url: str, openapi_url: str) -> None:
    """Serve ``docs_url`` (the page) and ``docs_url/assets/<file>`` from ``app``.

    The app must be created with ``docs_url=None`` and ``redoc_url=None`` so FastAPI's CDN
    pages are not served as well."""

    @app.get(docs_url, include_in_schema=False)
    def api_docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        assets = f"{root}{docs_url}/assets"
        html = _PAGES.render(
            "apidocs.html",
            title=f"{title} API",
            app_name=title,
            stylesheets=[f"{assets}/swagger-ui.css", f"{assets}/apidocs.css"],
            scripts=[f"{assets}/swagger-ui-bundle.js", f"{assets}/apidocs.js"],
            favicon=f"{assets}/favicon-32x32.png",
            boot={"openapi_url": f"{root}{openapi_url}"},
        )
        return HTMLResponse(html, headers=security_headers())

    @app.get(docs_url + "/assets/{name}", include_in_schema=False)
    def api_docs_asset(name: str) -> Response:
        path = ASSETS.get(name)
        if path is None:
            raise NotFound(f"no file {name!r} under {docs_url}/assets")
        headers = {**security_headers(), "Cache-Control": "public, max-age=86400"}
        return FileResponse(path, headers=headers)
