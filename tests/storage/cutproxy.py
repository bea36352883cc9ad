"""A loopback HTTP proxy that cuts GET response bodies short, for streaming-read tests.

``CutProxy(upstream_url, cut_after=N, times=K)`` forwards every request unchanged (Host
header included, so SigV4 signatures verify upstream). The first ``K`` GETs get their
status line and headers intact (Content-Length still announcing the whole body), then
only ``N`` body bytes, then the connection is closed: what a client sees when a server
or a middlebox drops a stream half way. ``tests/faults.FlakyProxy`` fails requests
before any byte; this one fails them in the middle. With ``times=0`` it cuts nothing and
only records: ``get_headers`` holds the headers of every GET it forwarded (what the
server saw: signatures, session tokens). Only loopback, only for tests.
"""

from __future__ import annotations

import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client hanging up on a cut stream is the point of this proxy, not an error."""


class CutProxy:
    def __init__(self, upstream_url: str, cut_after: int, times: int = 1) -> None:
        up = urlsplit(upstream_url)
        if up.hostname not in ("127.0.0.1", "localhost") or up.scheme != "http":
            raise ValueError(f"CutProxy only forwards to http on loopback, not {upstream_url!r}")
        self.upstream = (up.hostname, up.port or 80)
        self.cut_after = cut_after
        self.gets = 0  # GET requests received
        self.cut = 0  # GET responses cut short
        self.get_headers: list[dict[str, str]] = []  # the headers of each GET, as forwarded
        self._to_cut = times
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(  # poll 0.05 s: the exit waits at most this long, not 0.5 s
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="cut-proxy", daemon=True
        )

    def __enter__(self) -> CutProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()

    def _should_cut(self, method: str) -> bool:
        with self._lock:
            if method != "GET":
                return False
            self.gets += 1
            if self._to_cut > 0:
                self._to_cut -= 1
                self.cut += 1
                return True
            return False

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                cut = proxy._should_cut(self.command)
                if self.command == "GET":
                    with proxy._lock:
                        proxy.get_headers.append({k.lower(): v for k, v in self.headers.items()})
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
                    payload = resp.read() if self.command != "HEAD" else b""
                    self.send_response_only(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    announced = resp.getheader("Content-Length") if self.command == "HEAD" else len(payload)
                    if announced is not None:
                        self.send_header("Content-Length", str(announced))
                    self.end_headers()
                    if cut:
                        self.wfile.write(payload[: proxy.cut_after])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self.wfile.write(payload)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        return Handler
