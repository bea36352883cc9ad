"""A TCP server on loopback that accepts connections, reads the request and never answers.

The worst origin for a reader: connections succeed, so only read timeouts and the overall
budget (``s3.total_timeout``) can end the wait, or ``release``: a test that holds requests at
the origin for as long as it checks something (with timeouts far beyond that), then ends them
itself, instead of waiting for timeouts that must be long enough to outlast its check.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class StallingServer:
    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._released = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stalling-server", daemon=True)

    def __enter__(self) -> StallingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._conns:
            conn.close()
        self._sock.close()

    def release(self) -> None:
        """End every held request (the connection is closed without an answer), and every
        later one as soon as it has arrived: the reader gets a closed connection at once."""
        self._released.set()
        for conn in self._conns:
            with contextlib.suppress(OSError):  # already closed by the reader
                conn.shutdown(socket.SHUT_RDWR)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            self._conns.append(conn)
            conn.settimeout(1.0)
            try:
                conn.recv(65536)  # the request arrives; no answer ever leaves
            except OSError:
                pass
            if self._released.is_set():
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
