"""The caller of an API request with a body, authenticated before the body is read.

Why: the body limits (``limits.py``) reserve a request's declared ``Content-Length`` against
the process's in-flight budget when the request arrives, and hold it while the body arrives
(up to ``api.body_read_timeout``), before any route looked at the token. So a client with no
token at all, on any address that reaches the server, held the whole budget with a few
requests that declared large bodies and sent nothing: every node's commit and writer-lease
renewal got 503 for as long as it kept doing so, and a node that cannot renew its lease for
its ttl fences (its workspace's writes fail with EIO) (review22b). Now, outside local mode, a
request to ``/v1/`` that carries a body is answered 401 at once, body unread, unless its
bearer token is valid; the caller found is kept for the route (``request.state.principal``),
which looks the token up once more when the body has arrived (``deps.get_principal``): a token
revoked while the body came must not write it (caller43). Requests elsewhere (the browser's sign-in form, LabelX, which
authenticate callers of their own) are marked as not proven, and the body limits hold their
bodies in a budget of their own (``api.max_body_bytes``), never the API's.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datahub.api.deps import Services, authenticate
from datahub.api.errors import as_run, error_response
from datahub.errors import Unauthenticated

PROVEN = "datahub.caller_proven"  # scope key: the API authenticated this request's caller


def has_body(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    length = headers.get(b"content-length")
    return b"transfer-encoding" in headers or (length is not None and length.strip() not in (b"", b"0"))


class CallerBeforeBody:
    """ASGI middleware, outside the body limits: see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        services: Services = scope["app"].state.services  # as the routes find them (deps.get_services)
        if services.config.api.local_mode:
            scope[PROVEN] = True  # the callers local mode answers are this machine's user's
        elif scope["path"].startswith("/v1/") and has_body(scope):
            authorization = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            try:
                principal = await anyio.to_thread.run_sync(authenticate, authorization, services)
            except Unauthenticated as exc:
                # the body is never read: the connection closes, so it is not parsed as a next request
                message = as_run(exc.message, services.cli)
                response = error_response(401, exc.code, message, exc.details, {"Connection": "close"})

                async def no_body() -> Message:
                    return {"type": "http.disconnect"}

                await response(scope, no_body, send)
                return
            state = scope.setdefault("state", {})
            state["principal"] = principal
            state["principal_before_body"] = True  # the route looks it up once more, body read (deps.py)
            scope[PROVEN] = True
        await self.app(scope, receive, send)
