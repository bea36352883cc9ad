"""Fault injection for tests: a tiny threaded HTTP proxy that misbehaves on purpose.

``FlakyProxy(upstream_url, fail_first=N, status=503, delay=0.0)`` listens on a free
127.0.0.1 port. The first ``fail_first`` requests that ``match`` (default: all) fail:
after waiting ``delay`` seconds it answers ``status`` with an S3-style XML error body,
or, with ``status=0``, closes the connection without answering (a connection reset as
clients see it). Every other request is forwarded unchanged to ``upstream_url``, Host
header included, so signed (SigV4) requests still verify upstream.

    with FlakyProxy(moto.url, fail_first=2) as proxy:
        ... point an S3 client at proxy.url ...
        assert proxy.failed == 2 and len(proxy.requests) >= 3

``requests`` lists ``(method, path)`` of everything received; ``fail_more(n)`` arms the
next ``n`` matching requests to fail. Only loopback traffic, only for tests.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te"}
_REASONS = {429: "TooManyRequests", 500: "InternalError", 502: "BadGateway", 503: "SlowDown", 504: "Timeout"}
_PIPE_CHUNK = 256 * 1024


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """Clients that time out hang up on a stalled request; that is the point, not an error."""


class FlakyProxy:
    def __init__(
        self,
        upstream_url: str,
        fail_first: int = 0,
        status: int = 503,
        delay: float = 0.0,
        match: Callable[[str, str], bool] | None = None,
    ) -> None:
        up = urlsplit(upstream_url)
        if up.hostname not in ("127.0.0.1", "localhost", "::1") or up.scheme != "http":
            raise ValueError(f"FlakyProxy only forwards to http on loopback, not {upstream_url!r}")
        self.upstream = (up.hostname, up.port or 80)
        self.status = status
        self.delay = delay
        self.match = match or (lambda method, path: True)
        self.requests: list[tuple[str, str]] = []
        self.failed = 0
        self._to_fail = fail_first
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread: threading.Thread | None = None

    # --- control -------------------------------------------------------------------------------
    def start(self) -> FlakyProxy:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},  # stop() waits at most this long, not 0.5 s
                name="flaky-proxy",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FlakyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_more(self, n: int) -> None:
        """Make the next ``n`` matching requests fail (on top of any still armed)."""
        with self._lock:
            self._to_fail += n

    def heal(self) -> None:
        """Fail nothing more (failures armed and not yet used are dropped)."""
        with self._lock:
            self._to_fail = 0

    def _should_fail(self, method: str, path: str) -> bool:
        with self._lock:
            self.requests.append((method, path))
            if self._to_fail > 0 and self.match(method, path):
                self._to_fail -= 1
                self.failed += 1
                return True
            return False

    # --- the handler ---------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients pool connections

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy._should_fail(self.command, self.path):
                    if proxy.delay:
                        time.sleep(proxy.delay)  # a stalled server, on purpose
                    if proxy.status == 0:
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self._send_error(proxy.status)
                    return
                self._forward(body)

            def _send_error(self, status: int) -> None:
                code = _REASONS.get(status, "InjectedFault")
                payload = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>injected by FlakyProxy</Message></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def _forward(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                            conn.putheader(name, value)
                    if body or self.command in ("PUT", "POST"):
                        conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders(body or None)
                    resp = conn.getresponse()
                    headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
                    length = resp.getheader("Content-Length")
                    payload = None
                    if length is None and self.command != "HEAD" and resp.status not in (204, 304):
                        payload = resp.read()  # chunked upstream: re-frame with a length
                        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                        headers.append(("Content-Length", str(len(payload))))
                    self.send_response_only(resp.status, resp.reason)
                    for k, v in headers:
                        self.send_header(k, v)
                    self.end_headers()
                    if self.command == "HEAD":
                        return
                    if payload is not None:
                        self.wfile.write(payload)
                        return
                    while chunk := resp.read(_PIPE_CHUNK):
                        self.wfile.write(chunk)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        return Handler
