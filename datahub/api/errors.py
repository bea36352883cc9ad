"""The HTTP boundary of the error tree: every error leaves as ``{"error": {code, message, details}}``.

One handler maps DatahubError to its ``http_status``; request validation (422) and
framework errors (unknown route 404, wrong method 405) are put in the same shape, so
clients parse exactly one error format.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from datahub.errors import Busy, DatahubError, TooManyAttempts

log = logging.getLogger(__name__)
# Framework (starlette / FastAPI) errors by status; each code is listed in docs/api.md.
_HTTP_CODES = {400: "invalid_input", 404: "not_found", 405: "method_not_allowed"}
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    headers = {**(headers or {}), **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    if status == 500:
        # The server closes the connection after an unhandled error; saying so lets a pooled
        # client open a new one instead of sending its next request into a reset.
        headers["Connection"] = "close"
    body = {"error": {"code": code, "message": message, "details": jsonable_encoder(details or {})}}
    return JSONResponse(body, status_code=status, headers=headers)


def as_run(message: str, cli: str) -> str:
    """``message`` with each command it names in backticks (```datahub token create …```) as
    this server's user runs datahub (``Services.cli``: ``.venv/bin/datahub --home var`` under
    ``make run``, whose venv is not on PATH). Why: the API's 401 named a bare ``datahub``
    (newuser72), as the browser's pages did before newuser24."""
    return message if cli == "datahub" else message.replace("`datahub ", f"`{cli} ")


def served_cli(app: object) -> str:
    """``Services.cli`` of the app answering (``datahub`` without one)."""
    services = getattr(getattr(app, "state", None), "services", None)
    return getattr(services, "cli", "datahub")


async def _datahub_error(request: Request, exc: DatahubError) -> JSONResponse:
    message = as_run(exc.message, served_cli(request.app))
    return error_response(exc.http_status, exc.code, message, exc.details, headers=retry_after(exc))


def retry_after(exc: DatahubError) -> dict[str, str]:
    """``Retry-After`` for a ``busy`` or ``too_many_attempts`` answer that says when (its
    ``retry_after`` detail), so clients wait that long instead of guessing (RFC 9110, 10.2.3)."""
    seconds = exc.details.get("retry_after") if isinstance(exc, Busy | TooManyAttempts) else None
    return {"Retry-After": str(seconds)} if isinstance(seconds, int) and seconds >= 0 else {}


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"])
    return error_response(
        422, "validation_error", f"invalid request: {where}: {first['msg']}", {"errors": errors}
    )


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404 and message == "Not Found":
        message = f"no such endpoint: {request.method} {request.url.path}"
    if exc.status_code == 400:
        # FastAPI's only 400: a body its JSON decoder failed on with something other than a
        # syntax error (e.g. bytes that are not UTF-8)
        message = f"request body of {request.method} {request.url.path} could not be parsed ({message}): send UTF-8 JSON"
    return error_response(exc.status_code, code, message, headers=http_error_headers(request, exc))


def http_error_headers(request: Request, exc: StarletteHTTPException) -> dict[str, str]:
    """The framework's headers, with a 405's ``Allow`` naming every method the path accepts
    (RFC 9110). Starlette lists only the methods of the first route whose path matched, so a
    path served by several routes (``PUT`` and ``DELETE`` on a tag) would under-report."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # ask every route (``matches`` is the public route interface, and it also looks into
        # included routers) which of the methods would have been served at this path
        methods = [
            m
            for m in _METHODS
            if any(
                r.matches({**request.scope, "method": m})[0] is Match.FULL for r in request.app.router.routes
            )
        ]
        if methods:
            headers["Allow"] = ", ".join(methods)
    return headers


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    """A bug: log it with its traceback, answer in the same shape without internals."""
    log.error("unhandled error serving %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal", "internal server error; the server log has the details")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(Exception, _unexpected)
    app.add_exception_handler(DatahubError, _datahub_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
