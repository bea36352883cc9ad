"""The one HTTP client of the datahub API used by remote components (catalog store, task queue).

Why one: retries, time budgets, error mapping and NDJSON parsing must behave the same for
every remote call. Transient failures (connection errors, timeouts, 5xx answers) are
retried up to ``attempts`` times with exponential backoff inside ``budget`` seconds, then
raise CatalogUnavailable naming the URL (never the token). An ``{"error": {code, message,
details}}`` answer is raised again as the ``datahub.errors`` class with that code. NDJSON
listings end with an ``{"end": n}`` line; a listing without it is an error, never a
shorter listing. The token comes from the caller or ``$DATAHUB_API_TOKEN`` and lives only in
the pooled client's default headers. The pooled client is per process: a forked child makes
its own on first use (``ApiClient.client``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from datahub.errors import CatalogUnavailable, DatahubError, InvalidInput, Unauthenticated
from datahub.procs import PerProcess
from datahub.validation import unparsable_url, without_password

TOKEN_ENV = "DATAHUB_API_TOKEN"
T = TypeVar("T")
_READ_CHUNK = 1024 * 1024  # bytes per read of a streamed listing
_TRANSIENT = {"internal", "busy", "storage_unavailable", "catalog_unavailable"}
# how a server's 404 for a path it has no route for begins (datahub.api.errors; LabelX's
# handler passes Starlette's "Not Found" on), as against a missing dataset's or tag's
_NO_ROUTE = ("no such endpoint: ", "Not Found")
LOST_ANSWER = object()  # ApiClient.json's answer when a retry found an earlier attempt's work done
MAX_RETRY_AFTER = 30.0  # seconds: a server asking for longer is waited on no longer than this


def _error_classes() -> dict[str, type[DatahubError]]:
    """code -> class, from the error tree itself (one table; a new error class is mapped by existing)."""
    table: dict[str, type[DatahubError]] = {}
    pending: list[type[DatahubError]] = [DatahubError]
    while pending:
        cls = pending.pop()
        table.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    table["validation_error"] = InvalidInput  # the API's 422 for a request off its schema
    return table


def error_from_answer(status: int, body: Any) -> DatahubError | None:
    """The datahub error an ``{"error": {code, message, details}}`` answer carries, else None."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return None
    cls = _error_classes().get(error["code"], DatahubError)
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    exc = cls(str(error.get("message") or f"the catalog server answered {status}"), **details)
    return exc


class Retry(Exception):
    """A transient failure worth another attempt (its text names what happened); ``after``:
    the seconds the server asked the client to wait (``Retry-After``), if it said."""

    def __init__(self, message: str, after: float | None = None) -> None:
        super().__init__(message)
        self.after = after


def retry_after(response: httpx.Response) -> float | None:
    """The delay of a ``Retry-After: <seconds>`` header, capped at ``MAX_RETRY_AFTER`` (an
    HTTP date or garbage is ignored: the client's own backoff applies). ASCII digits only:
    ``str.isdigit`` holds for '²' too, whose ``float`` raised a bare ValueError (review74)."""
    value = response.headers.get("Retry-After", "").strip()
    if not (value.isascii() and value.isdigit()):
        return None
    return min(float(value), MAX_RETRY_AFTER)


def header_token(token: str, *, given: bool = False) -> str:
    """``token`` as an ``Authorization`` header carries it: whitespace around it dropped (a
    Kubernetes Secret made from a file keeps its newline; the server strips it too), and
    InvalidInput, which never shows it, for any other character no token has (a header cannot
    carry a control character or a non-ASCII one; a space inside is a mistake such as
    ``Bearer dh_…`` in the variable).

    Why: httpx refused such a header with an error quoting it whole (``LocalProtocolError:
    Illegal header value b'Bearer dh_…\\n'``), which this client retried as an unreachable
    server and reported in CatalogUnavailable: the CLI's output, a mount's log and its
    ``.datahub`` file, a pack task's failure, and through the CSI node plugin the pod's events,
    where the users of the pod's namespace read the node's token (caller71). A non-ASCII one
    failed with a bare UnicodeEncodeError."""
    token = token.strip()
    if all("!" <= c <= "~" for c in token):  # visible ASCII: RFC 6750's b64token and more
        return token
    where = "the API token given to this client" if given else f"the API token in ${TOKEN_ENV}"
    raise InvalidInput(
        f"{where} holds a character no API token has (a space, a control character or a non-ASCII "
        "one; the token is not shown): set it to the token `datahub token create` printed, alone "
        "(no 'Bearer ' before it) and on one line (a Secret made from a file may hold the file's "
        "other lines)",
        setting=TOKEN_ENV,
    )


class ApiClient:
    """A pooled httpx client of one datahub API server, with the retry and error rules above."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        attempts: int = 5,
        backoff: float = 0.2,
        budget: float = 60.0,
    ) -> None:
        self._base = url.rstrip("/")  # what requests go to; self.url is what messages show
        self.url = without_password(self._base)
        try:
            httpx.URL(self._base)
        except httpx.InvalidURL:  # its message quotes a piece of the URL: a password's, say
            raise unparsable_url(url, "API server URL", "http(s)://[USER:PASSWORD@]HOST[:PORT]") from None
        self.attempts, self.backoff, self.budget = max(1, attempts), backoff, budget
        self._timeout, self._connect_timeout = timeout, connect_timeout
        given = token is not None
        token = header_token(token if given else os.environ.get(TOKEN_ENV, ""), given=given)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._clients = PerProcess(
            lambda: httpx.Client(
                base_url=self._base,
                headers=headers,
                timeout=httpx.Timeout(timeout, connect=connect_timeout),
                limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
                follow_redirects=False,
            )
        )

    @property
    def client(self) -> httpx.Client:
        """This process's pooled client (``procs.PerProcess``).

        Why per process: a forked child (a DataLoader worker over a catalog its parent opened)
        shared the parent's keep-alive connections, and a parent and a child asking at once
        read each other's answers (tests/catalog/test_fork27.py); a parent thread inside the
        pool's lock at the fork left it held for ever in the child."""
        return self._clients.get()

    def __repr__(self) -> str:
        return f"ApiClient({self.url!r})"  # never the token

    def read_timeout(self, read: float) -> httpx.Timeout:
        """This client's timeouts with another for reading the answer: for a request the server
        answers only once its work is done (a commit), however long that takes, so a slow
        answer is waited for instead of being cut and retried into the same wait."""
        return httpx.Timeout(self._timeout, connect=self._connect_timeout, read=read)

    # --- transport --------------------------------------------------------------------------------
    def call(self, what: str, attempt: Callable[[], T], *, budget: float | None = None) -> T:
        """Run ``attempt`` until it succeeds or the attempts / time budget (``budget``, else the
        client's) run out."""
        deadline = time.monotonic() + (self.budget if budget is None else budget)
        last = ""
        for n in range(self.attempts):
            asked = None
            try:
                return attempt()
            except Retry as exc:
                last, asked = str(exc), exc.after
            except httpx.TimeoutException as exc:
                last = f"timed out ({type(exc).__name__})"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {_safe(exc)}"
            pause = max(self.backoff * 2**n, asked or 0.0)  # a busy server says how long to wait
            if n + 1 == self.attempts or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
        raise CatalogUnavailable(
            f"the catalog server {self.url} did not answer after {n + 1} attempt(s) ({what}): {last}; "
            "check that 'datahub serve' runs there and is reachable",
            url=self.url,
            attempts=n + 1,
        )

    def check(self, response: httpx.Response, what: str) -> None:
        """Raise the mapped error for an error answer; _Retry for a transient one."""
        if response.status_code < 400:
            return
        response.read()
        try:
            body = response.json()
        except ValueError:
            body = None
        error = error_from_answer(response.status_code, body)
        if response.status_code >= 500 and (error is None or error.code in _TRANSIENT):
            raise Retry(
                f"HTTP {response.status_code}" + (f" {error.code}: {error.message}" if error else ""),
                after=retry_after(response),
            )
        if error is None:
            raise CatalogUnavailable(
                f"the catalog server {self.url} answered {what} with HTTP {response.status_code} "
                "and no datahub error: is that URL a datahub API server?",
                url=self.url,
                status=response.status_code,
            )
        if isinstance(error, Unauthenticated):
            hint = f"{error.message} (server {self.url}; this client sends the token in ${TOKEN_ENV})"
            raise Unauthenticated(hint, **error.details)
        if response.status_code == 404 and error.code == "not_found" and error.message.startswith(_NO_ROUTE):
            raise self.no_route(response, what)
        raise error

    def no_route(self, response: httpx.Response, what: str) -> CatalogUnavailable:
        """The server has no such route: a catalog URL with a path the server has no API
        under (``http://host:8080/labelx``), or a server older than this client. Why a message
        of its own: relayed as it was ("no such endpoint: GET /labelx/v1/datasets", exit 3) it
        read as a missing dataset and named no fix."""
        parts = urlsplit(self.url)
        root = f"{parts.scheme}://{parts.netloc}"
        return CatalogUnavailable(
            f"the catalog server {self.url} has no datahub API at {response.request.url.path} ({what}): "
            f"catalog_url must be the API server's root (such as {root}), or the path a proxy serves "
            "it under; if it is, the server may be older than this client",
            url=self.url,
            status=404,
        )

    def json(
        self, method: str, path: str, *, what: str, done_if: type[DatahubError] | None = None, **kwargs: Any
    ) -> Any:
        """``done_if``: the error a retry gets when an earlier attempt, whose answer was lost
        (a timeout, a cut connection, a 5xx), did the work: a create answered "already exists".
        Raised by a retry after such a loss, it returns ``LOST_ANSWER`` instead, so the caller
        can look at what is there rather than report its own success as a failure."""
        unsure = False  # an earlier attempt may have reached the server and been applied

        def attempt() -> Any:
            nonlocal unsure
            try:
                response = self.client.request(method, path, **kwargs)
            except httpx.TransportError:
                unsure = True
                raise
            try:
                self.check(response, what)
            except Retry:
                # a 5xx: a gateway's that gave up waiting, or the server's after the work was
                # applied, says no more than a cut connection about whether it was
                unsure = True
                raise
            except DatahubError as exc:
                if unsure and done_if is not None and isinstance(exc, done_if):
                    return LOST_ANSWER
                raise
            if response.status_code == 204:
                return None
            try:
                return response.json()
            except ValueError:
                raise Retry(f"answered {what} with something that is not JSON") from None

        return self.call(what, attempt)

    def lines(self, path: str, *, what: str, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The objects of an NDJSON listing, parsed as they arrive; the end line must come."""
        for batch in self.batches(path, what=what, params=params):
            for obj in batch:
                if not isinstance(obj, dict):
                    raise self.garbage(what, "a line that is not a JSON object")
                yield obj

    def batches(
        self, path: str, *, what: str, params: Mapping[str, Any], header: Any = None
    ) -> Iterator[list[Any]]:
        """The items of an NDJSON listing, a list per chunk read (not yet checked to be objects).
        With ``header``, the listing's first line must equal it (a format and its columns) and
        is not an item: a server speaking another format is an error, never a misread listing.

        Why batches: a listing of 10^7 records is CPU-bound on the client; reading large
        chunks and parsing each chunk's complete lines with one ``json.loads`` of a JSON
        array does the per-item work in C instead of one Python call per line. The end line
        must still come, with the count of items sent; an end line is found by the bytes
        ``"end"``, which every end line holds (a chunk without them holds none)."""

        def attempt() -> httpx.Response:
            request = self.client.build_request("GET", path, params=params)
            response = self.client.send(request, stream=True)
            try:
                self.check(response, what)
            except BaseException:
                response.close()
                raise
            return response

        response = self.call(what, attempt)
        count = 0
        tail = b""
        try:
            chunks = response.iter_bytes(_READ_CHUNK)
            while True:
                chunk = next(chunks, None)
                if chunk is None:
                    break  # the stream ended before its end line (a last line without its newline is cut)
                cut = chunk.rfind(b"\n")
                if cut < 0:
                    tail += chunk
                    continue
                body, tail = tail + chunk[:cut], chunk[cut + 1 :]
                items = self._parse(body, what) if body.strip() else []
                if header is not None and items:
                    if items[0] != header:
                        first = json.dumps(items[0])[:200]
                        raise self.garbage(
                            what,
                            f"a listing in another format (first line {first}, expected {json.dumps(header)}; "
                            "are client and server different datahub releases?)",
                        )
                    del items[0]
                    header = None
                if b'"end"' in body:
                    for i, obj in enumerate(items):
                        if isinstance(obj, dict) and "end" in obj and len(obj) == 1:
                            count += i
                            if i:
                                yield items[:i]
                            if obj["end"] != count:
                                raise self.garbage(what, f"{count} items but an end line saying {obj['end']}")
                            return
                if items:
                    count += len(items)
                    yield items
        except httpx.HTTPError as exc:
            raise CatalogUnavailable(
                f"the catalog server {self.url} cut {what} short after {count} item(s): "
                f"{type(exc).__name__}; nothing after that point was read, retry the call",
                url=self.url,
                cut=True,
            ) from None
        finally:
            response.close()
        raise CatalogUnavailable(
            f"the catalog server {self.url} ended {what} after {count} item(s) without its end line: "
            "the listing is incomplete; retry the call",
            url=self.url,
            cut=True,
        )

    def _parse(self, body: bytes, what: str) -> list[Any]:
        """The items of complete NDJSON lines: one parse of them as a JSON array, or line by
        line (skipping blank lines) when that fails, to name the bad line."""
        try:
            return json.loads(b"[" + body.replace(b"\n", b",") + b"]")
        except ValueError:
            pass
        items = []
        for line in body.split(b"\n"):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except ValueError:
                raise self.garbage(what, "a line that is not JSON") from None
        return items

    def garbage(self, what: str, why: str) -> CatalogUnavailable:
        return CatalogUnavailable(
            f"the catalog server {self.url} answered {what} with {why}: is that URL a datahub API server?",
            url=self.url,
        )

    def decode(self, what: str, convert: Callable[[Any], T], obj: Any) -> T:
        try:
            return convert(obj)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise self.garbage(what, "an object of the wrong shape") from None

    def close(self) -> None:
        """Close this process's pool; a parent's, in a forked child, is left alone."""
        client = self._clients.drop()
        if client is not None:
            client.close()


def _safe(exc: BaseException) -> str:
    """A transport error's text; httpx's carries no request header once ``header_token`` has
    checked the token (an illegal header value was quoted whole in it)."""
    return str(exc) or type(exc).__name__
