"""Request body limits: size (413), read deadline (408) and an in-flight budget (503).

An ASGI middleware, because only there can a body be bounded as it arrives, before any
endpoint runs (promise 4: a refused request changes nothing):

- size: a ``Content-Length`` above ``max_body_bytes`` is refused at once; a chunked body
  is counted as it arrives and refused one byte past the limit (413);
- deadline: the whole body must arrive within ``body_read_timeout`` seconds, so a client
  trickling bytes cannot hold a buffer and a connection forever (408, ``Connection:
  close``: the rest of that body would otherwise be read as the next request);
- budget: the bytes of bodies held at once, across all requests of the process, stay
  under ``max_inflight_body_bytes``. A declared ``Content-Length`` is reserved up front,
  chunked bodies as they arrive, and the reservation is held until the response is sent
  (the endpoint works on the body until then). A request that does not fit gets 503
  ``busy`` with ``Retry-After``, so concurrent large commits are turned away instead of
  running the server out of memory.

The body is spooled as it arrives: bodies up to ``SPOOL_IN_MEMORY`` stay in memory, bigger
ones go to an anonymous temporary file, so a 59 MB commit costs the server no RAM for its
bytes (issue 12 item 3: RSS <= 3x the body). Routes that read ``request.body()`` get the
bytes as before (read from the spool when they ask); the commit route reads the spooled
file itself (``body_file``), a window at a time. The budget now bounds the bytes spooled
and being worked on at once (disk, and the work each body causes), not only RAM.
"""

from __future__ import annotations

import asyncio
import errno
import re
import tempfile
from typing import IO, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datahub.api.body_depth import MAX_BODY_DEPTH, BodyError, DepthScanner
from datahub.api.early_auth import PROVEN
from datahub.api.errors import error_response
from datahub.config import Config
from datahub.errors import (
    BodyTimeout,
    Busy,
    DatahubError,
    InvalidInput,
    NoSpace,
    PayloadTooLarge,
    StorageError,
)

RETRY_AFTER_SECONDS = 2
SPOOL_IN_MEMORY = 1024 * 1024  # bodies up to this size are never written to disk
_DATASET = re.compile(r"/v1/(?:remote/)?datasets/([^/]+)")  # the dataset a refusal names
_BODY_FILE = "datahub.body_file"  # the scope key under which the spooled body is handed on


def body_file(scope: Scope) -> IO[bytes] | None:
    """The request body the middleware spooled (a seekable binary file), if it did."""
    return scope.get(_BODY_FILE)


def _is_form(scope: Scope) -> bool:
    content_type = dict(scope.get("headers") or []).get(b"content-type", b"").lower()
    return content_type.startswith((b"multipart/form-data", b"application/x-www-form-urlencoded"))


def add_body_limits(app: Any, config: Config) -> None:
    """Bound every request body ``app`` takes with ``config.api``'s limits (outermost so far).

    One implementation for every app datahub serves: the API (``create_app``) and LabelX run
    alone (``datahub labelx serve``), which counted only a declared ``Content-Length`` and read
    a chunked body whole before measuring it (and a page's form not at all), with no read
    deadline. Bodies no API token proved (the sign-in form, LabelX) share a budget of one
    ``max_body_bytes``, never the API's in-flight budget."""
    app.add_middleware(
        BodyLimits,
        max_body_bytes=config.api.max_body_bytes,
        body_read_timeout=config.api.body_read_timeout,
        # One budget per app, i.e. per server process.
        budget=BodyBudget(max(config.api.max_inflight_body_bytes, config.api.max_body_bytes)),
        unproven=BodyBudget(config.api.max_body_bytes),
    )


class BodyBudget:
    """Bytes of request bodies held at once. Used only from the event loop: no lock needed."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n


class BodyLimits:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        body_read_timeout: float,
        budget: BodyBudget,
        unproven: BodyBudget | None = None,
    ) -> None:
        """``unproven``: the budget of bodies whose caller the API did not authenticate first
        (``early_auth``: the browser's sign-in, LabelX), so they never hold the API's."""
        self.app, self.max_body_bytes = app, max_body_bytes
        self.body_read_timeout, self.proven, self.unproven = body_read_timeout, budget, unproven

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reserved = 0
        spool: IO[bytes] | None = None
        budget = self.proven if self.unproven is None or scope.get(PROVEN) else self.unproven
        try:
            declared = dict(scope.get("headers") or []).get(b"content-length")
            if declared is not None and declared.isdigit():
                if int(declared) > self.max_body_bytes:
                    await self._refuse(scope, send, self._too_large(scope))
                    return
                if not budget.take(int(declared)):
                    await self._refuse(scope, send, self._busy(budget, int(declared)))
                    return
                reserved = int(declared)
            # closed in the finally below, once the route is done with it
            spool = spooled = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, prefix="datahub-body-")  # noqa: SIM115
            size = 0
            refusal: DatahubError | None = None
            # Every body but a form is JSON to some parser (FastAPI decodes a body without a
            # content type as JSON, the commit routes whatever its type): forms are decoded by
            # a parser that does not recurse, and may carry binary files.
            depth = None if _is_form(scope) else DepthScanner()
            try:
                async with asyncio.timeout(self.body_read_timeout):
                    while True:
                        message = await receive()
                        if message["type"] != "http.request":  # client went away
                            return
                        chunk = message.get("body", b"")
                        size += len(chunk)
                        if size > self.max_body_bytes:
                            refusal = self._too_large(scope)
                            break
                        if size > reserved:  # chunked (or a short Content-Length header)
                            if not budget.take(size - reserved):
                                refusal = self._busy(budget, size)
                                break
                            reserved = size
                        try:
                            if depth is not None:
                                depth.feed(chunk, last=not message.get("more_body", False))
                        except BodyError as exc:
                            refusal = self._unparseable(scope, exc)
                            break
                        try:
                            spooled.write(chunk)
                        except OSError as exc:  # the spool spilled into a full temporary directory
                            refusal = self._no_room(scope, exc, size)
                            break
                        if not message.get("more_body", False):
                            break
            except TimeoutError:
                refusal = BodyTimeout(
                    f"the request body did not arrive within {self.body_read_timeout:g} s "
                    f"(api.body_read_timeout; {size} bytes received); send it faster or in smaller requests",
                    body_read_timeout=self.body_read_timeout,
                    received_bytes=size,
                )
            if refusal is not None:
                await self._refuse(scope, send, refusal)
                return
            replayed = False

            async def replay() -> Message:
                """The body in one message, read from the spool only if the route asks for it."""
                nonlocal replayed
                if not replayed:
                    replayed = True
                    spooled.seek(0)
                    return {"type": "http.request", "body": spooled.read(), "more_body": False}
                return await receive()

            # In place, not a copy: outer middleware reads what the router adds to the scope.
            scope[_BODY_FILE] = spooled
            await self.app(scope, replay, send)
        finally:
            scope.pop(_BODY_FILE, None)
            if spool is not None:
                spool.close()  # a spilled body's file is anonymous: closing removes it
            budget.give(reserved)

    @staticmethod
    def _no_room(scope: Scope, exc: OSError, size: int) -> DatahubError:
        """A body the server could not store: NoSpace naming the directory, not a bare
        ``OSError`` answered 500 (which the remote catalog retried into ``catalog_unavailable``,
        as if the server were down)."""
        where = tempfile.gettempdir()
        path = scope.get("path", "")
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            return StorageError(
                f"the server could not store the request body of {scope.get('method', '')} {path} "
                f"in {where}: {exc.strerror or exc}; nothing was changed; see the server's log"
            )
        return NoSpace(
            f"the server's temporary directory {where} is full: the request body of "
            f"{scope.get('method', '')} {path} was not stored ({size} bytes received) and nothing "
            "was changed; free space there (or point TMPDIR at a larger disk) and send it again",
            directory=where,
            received_bytes=size,
        )

    def _too_large(self, scope: Scope) -> PayloadTooLarge:
        """Names the request and what to do: a commit's advice (split the change set) was
        given to every route, LabelX's forms and uploads too."""
        path = scope.get("path", "")
        if _DATASET.match(path):
            advice = "split the change set into several commits"
        else:
            advice = "send less in one request (a LabelX suggestions file: split it into several uploads)"
        return PayloadTooLarge(
            f"request body of {scope.get('method', '')} {path} larger than "
            f"{self.max_body_bytes} bytes (api.max_body_bytes); {advice}, or raise api.max_body_bytes "
            "on the server",
            max_body_bytes=self.max_body_bytes,
        )

    @staticmethod
    def _unparseable(scope: Scope, exc: BodyError) -> InvalidInput:
        path = scope.get("path", "")
        dataset = m.group(1) if (m := _DATASET.match(path)) else None
        about = f" for dataset {dataset!r}" if dataset else ""
        return InvalidInput(
            f"request body of {scope.get('method', '')} {path}{about} refused within its first "
            f"{exc.at} bytes: {exc.why}",
            **({"dataset": dataset} if dataset else {}),
            max_body_depth=MAX_BODY_DEPTH,
        )

    def _busy(self, budget: BodyBudget, size: int) -> Busy:
        if budget is self.proven:
            setting = "api.max_inflight_body_bytes"
        else:  # the browser's sign-in and LabelX, whose callers the API did not authenticate
            setting = "api.max_body_bytes, the bodies of callers not authenticated by an API token"
        return Busy(
            f"the server is already receiving {budget.used} bytes of request bodies and "
            f"{size} more would exceed {setting} ({budget.limit}); retry in {RETRY_AFTER_SECONDS} s",
            max_inflight_body_bytes=budget.limit,
        )

    async def _refuse(self, scope: Scope, send: Send, error: DatahubError) -> None:
        response = error_response(error.http_status, error.code, error.message, error.details)
        if isinstance(error, Busy):
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        if isinstance(error, (BodyTimeout, NoSpace, StorageError)):
            # The unread rest of the body must not be parsed as a next request.
            response.headers["Connection"] = "close"

        async def no_body() -> Message:
            return {"type": "http.disconnect"}

        await response(scope, no_body, send)
