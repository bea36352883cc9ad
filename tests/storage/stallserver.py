"""A TCP server on loopback that accepts connections, reads the request and never answers.

The worst origin for a reader: connections succeed, so only read timeouts and the overall
budget (``s3.total_timeout``) can end the wait.
"""

from __future__ import annotations

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
