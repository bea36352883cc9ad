"""``create_labelx_app``: the LabelX FastAPI app (JSON API + browser pages + static files).

Runs alone (``datahub labelx serve``) or mounted beside the datahub API under ``/labelx``;
every URL the pages and scripts build starts from the ASGI ``root_path``, so both work.
The HTTP layer is thin: it authenticates, checks CSRF on state-changing requests, calls
``LabelService`` / the exporters, and maps DatahubError to its HTTP status exactly once.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from datahub.api.errors import http_error_headers, retry_after
from datahub.api.limits import add_body_limits
from datahub.config import Config
from datahub.errors import DatahubError, InvalidInput, NotFound, Unauthenticated
from datahub.web import security_headers
from datahub.web.apidocs import add_api_docs
from datahub.web.cookies import cookie_paths, cookie_values
from datahub.web.render import PAGE_CACHE
from labelx import pages, routes
from labelx.deps import LabelX, labelx_db_path
from labelx.models import ERRORS, PATTERN_RULES

HERE = Path(__file__).parent
__all__ = ["create_labelx_app", "labelx_db_path"]


# Framework errors by status, in the codes the API documents (issue 24 item 1: not "http_error").
_HTTP_CODES = {400: "invalid_input", 404: "not_found", 405: "method_not_allowed"}


def invalid_reason(error: dict[str, Any]) -> str:
    """What is wrong with one value, in the words of the rule it broke: a pattern is named by
    its rule (``PATTERN_RULES``), never shown as a regular expression a user must decode."""
    if error.get("type") == "string_pattern_mismatch":
        rule = PATTERN_RULES.get(
            (error.get("ctx") or {}).get("pattern", ""), "does not have the expected form"
        )
        return f"{error.get('input')!r}: {rule}"
    if error.get("type") == "extra_forbidden":  # a misspelt field, never ignored
        return "unknown field (check its spelling; each request's fields are in /labelx/api/docs)"
    if error.get("type") in ("too_short", "too_long"):  # a list: pydantic said "List should have
        # at least 1 item after validation, not 0" to the form's Classes " , " (newuser26)
        ctx = error.get("ctx") or {}
        bound = ctx.get("min_length") if error["type"] == "too_short" else ctx.get("max_length")
        n = ctx.get("actual_length")
        want = "needs at least" if error["type"] == "too_short" else "takes at most"
        return f"{want} {bound} {'entry' if bound == 1 else 'entries'}, got {n if n else 'none'}"
    if error.get("type") == "int_parsing":  # an address's id: "/projects/abc" (newuser29)
        return f"{error.get('input')!r} is not a whole number"
    return error.get("msg", "does not match the schema")


def _version_hint(where: str, error: dict[str, Any]) -> str:
    """A project's dataset given as ``pets@v1`` (the New project form's Dataset, as the CLI and
    the browser write a version): where its version goes; the form said only the name rule
    (newuser26; ``labelx create-project --dataset pets@v1`` said so since newuser17)."""
    given = error.get("input")
    if where != "dataset" or not isinstance(given, str) or "@" not in given:
        return ""
    name, _, ref = given.partition("@")
    return f"; a version goes in its own field: dataset {name!r}, version {ref or 'latest'!r}"


def reported_error(errors: list[dict[str, Any]]) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The one error a refused request is answered with, and where it is. A value every branch
    of a union refused (a project's version: a number or a tag) gave one error per branch,
    each at the field plus the branch's name: the first was reported, so the home page's
    Version ``bad!`` read "version.function-before[whole_number(), constrained-int]: Input
    should be a valid integer". Those are told by their shared field and input and their
    different kinds; the branch with a rule in words (a pattern) is reported, at the field."""
    first = errors[0] if errors else {}
    loc = tuple(first.get("loc", ()))
    if str(first.get("type", "")).endswith("_type") and len(loc) > 1 and _is_branch(loc[-1]):
        # an object a union's plain branch refused for its type ("classes.0.constrained-str: Input
        # should be a valid string" for a class {"name": "a", "color": "red"}) was refused by the
        # object's branch for what it holds: that one says what to change (newuser22)
        n = len(loc) - 1  # where the branch's name is
        for e in errors:
            at = tuple(e["loc"])
            if len(at) > n + 1 and at[:n] == loc[:n] and at[n] != loc[n] and _is_branch(at[n]):
                return e, loc[:n] + at[n + 1 :]
    branches = [
        e
        for e in errors
        if len(loc) > 1 and tuple(e["loc"])[:-1] == loc[:-1] and e.get("input") == first.get("input")
    ]
    if len({e["type"] for e in branches}) < 2:
        return first, loc
    worded = next((e for e in branches if e["type"] == "string_pattern_mismatch"), first)
    return worded, loc[:-1]


def _is_branch(part: Any) -> bool:
    """A union branch's name in an error's location (``constrained-str``, ``LabelClassSpec``,
    ``function-before[…]``), never a field of the JSON API, whose names are snake_case."""
    return isinstance(part, str) and (any(c in part for c in "-[") or part[:1].isupper())


def create_labelx_app(
    config: Config,
    *,
    catalog: Any = None,
    stores: Any = None,
    cache: Any = None,
    secure_cookies: bool = False,
    limit_bodies: bool = True,
) -> FastAPI:
    """Build the app. Services not given are opened from ``config`` and closed on shutdown.

    ``secure_cookies=True`` (or ``api.secure_cookies``, which ``datahub serve --secure-cookies``
    sets for the LabelX it serves under /labelx) marks cookies Secure even when the app itself
    sees plain http (behind a TLS-terminating proxy); over https they are Secure anyway.

    ``limit_bodies``: bound request bodies with the API's own limits (``api.max_body_bytes``
    413, ``api.body_read_timeout`` 408, a budget of bodies in flight: 503), before any route
    reads them. Leave it on when the app is served alone (``datahub labelx serve``); an app
    mounted in the API's (``datahub serve``) is bounded by the API's, so it passes False.
    """
    owned: list[Any] = []
    if catalog is None:
        from datahub.catalog import open_catalog

        catalog = open_catalog(config.resolved_catalog_url, retry=config.catalog)
        owned.append(catalog)
    if stores is None:
        from datahub.storage import StoreRegistry

        stores = StoreRegistry(config)
        owned.append(stores)
    if cache is None:  # images are served through the datahub cache (RAM -> disk -> origin)
        from datahub.cache import open_cache

        cache = open_cache(config, stores)
        owned.insert(0, cache)
    lx = LabelX(config, catalog, stores, cache, secure_cookies or config.api.secure_cookies)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        lx.store.close()
        for obj in owned:  # the cache before the stores it reads through
            obj.close()

    app = FastAPI(
        title="LabelX",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's page loads Swagger UI from a CDN: served from here instead
        redoc_url=None,
        openapi_url="/api/openapi.json",
        responses=ERRORS,
    )
    add_api_docs(app, title="LabelX", docs_url="/api/docs", openapi_url=app.openapi_url)
    app.state.labelx = lx
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def opens_page(request: Request) -> bool:
        """A person's browser asking for a page (a GET that accepts HTML)."""
        return request.method == "GET" and "text/html" in request.headers.get("accept", "")

    def shows_page(request: Request) -> bool:
        """A page is the answer: a browser opens it, and it is not under /api/ (always JSON)."""
        return opens_page(request) and not request.url.path.startswith(pages.base_path(request) + "/api/")

    def answer(request: Request, exc: DatahubError) -> Response:
        if lx.cli != "datahub" and "`datahub " in exc.message:
            # a command the message names, as make run's user runs it: a bare datahub is not
            # on its PATH (newuser24), as the dataset browser's error pages say it
            exc = copy.copy(exc)
            exc.message = exc.message.replace("`datahub ", f"`{lx.cli} ")
            exc.args = (exc.message,)
        if shows_page(request):
            page = pages.error_page(request, exc)  # a page, not the JSON API's answer
            page.headers.update(retry_after(exc))
            return page
        # Retry-After: a 429 of the sign-in throttle (POST /api/tokens' password) says when
        return JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status, headers=retry_after(exc))

    @app.exception_handler(DatahubError)
    async def _error(request: Request, exc: DatahubError) -> Response:
        if isinstance(exc, Unauthenticated) and opens_page(request):
            return RedirectResponse(pages.login_url(request), status_code=303)
        return answer(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        """A body or parameter that does not fit its model is bad input (400), like any other."""
        error, loc = reported_error(list(exc.errors()))
        # a path's or query's parameter by its name, as a body's field is: "path.task_id" read
        # as a file path to a user who typed /tasks/abc (newuser29)
        named = loc[1:] if loc[:1] in (("path",), ("query",)) else loc
        where = ".".join(str(p) for p in named if p != "body") or "body"
        return answer(
            request,
            InvalidInput(f"invalid request: {where}: {invalid_reason(error)}{_version_hint(where, error)}"),
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Framework errors (unknown route, wrong method) in the same shape; the headers stay
        (a 405 lists the allowed methods in ``Allow``)."""
        if exc.status_code == 404 and shows_page(request):  # a mistyped address: a page too
            missing = NotFound(f"no LabelX page at {request.url.path}: start from your projects")
            return pages.error_page(request, missing)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code in (404, 405):
            message = f"{message}: {request.method} {request.url.path}"
        if exc.status_code == 400:  # FastAPI's body-parse failure: too deep to decode, or not UTF-8
            message = (
                f"request body of {request.method} {request.url.path} could not be parsed (not "
                "UTF-8, or nested too deep to decode): send UTF-8 JSON"
            )
        return JSONResponse(
            {"error": {"code": code, "message": message}},
            status_code=exc.status_code,
            headers=http_error_headers(request, exc),
        )

    if limit_bodies:  # inside the headers below, so a refusal carries them too
        add_body_limits(app, config)

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Response:
        # asked before routing, which moves the scope's root_path to the mount it reaches
        static = request.url.path.startswith(f"{pages.base_path(request)}/static/")
        response = await call_next(request)
        name = lx.auth.session_cookie
        if len({v for v in cookie_values(request, name) if lx.auth.ours(v)}) > 1:
            # a session cookie another page wrote beside LabelX's own (labelx.deps refused the
            # request): expired at every path it may have, with LabelX's own; the person logs in
            # again. Another LabelX's cookies (another name) are left alone (caller44)
            own = pages.cookie_path(request)  # not LabelX's own, when this answer set a new one (a login)
            setting = any(h.startswith(f"{name}=") for h in response.headers.getlist("set-cookie"))
            for path in cookie_paths(request.url.path):
                if not (setting and path == own):
                    response.delete_cookie(name, path=path)
        for name, value in security_headers().items():  # the same CSP as the dataset browser
            response.headers.setdefault(name, value)
        if not static:
            # a page holds its session's CSRF token and user, an API answer the person's projects,
            # tasks and labels: never kept (datahub.web.PAGE_CACHE). Only pages and redirects
            # were: a JSON answer opened in the browser (or an export) was shown again by Back
            # after Sign out, from the cache (caller74). Pictures say their own (private, no-cache)
            response.headers.setdefault("Cache-Control", PAGE_CACHE["Cache-Control"])
        return response

    app.include_router(pages.router, include_in_schema=False)  # browser pages, not the API
    app.include_router(routes.router)
    return app
