"""A loopback TCP proxy that takes an origin down and brings it back, for outage tests.

``OutageProxy(upstream_url)`` listens on a fixed free 127.0.0.1 port and relays bytes both
ways. Its ``mode`` can change at any moment:

- ``"up"``: bytes flow.
- ``"refuse"``: the listening socket is closed (the port stays bound), so new connections are refused, and every
  open connection is reset (what clients see when the origin's process dies).
- ``"stall"``: connections are accepted and bytes are held, in both directions, until the
  mode changes (a black-holed network: nothing answers, nothing is refused). Held bytes
  are delivered when the origin is up again, as TCP retransmission would, unless the
  client gave up and closed first.
- ``"hang"``: like ``"stall"``, but what arrives is dropped, and a connection that carried
  anything during the hang stays silent for ever, after the origin is back too (a server
  or middlebox that lost those connections' state): only new connections are answered.

Byte-level, so signed S3 requests reach the upstream unchanged. Only loopback.
"""

from __future__ import annotations

import socket
import struct
import threading
from urllib.parse import urlsplit

MODES = ("up", "refuse", "stall", "hang")


class OutageProxy:
    def __init__(self, upstream_url: str) -> None:
        up = urlsplit(upstream_url)
        if up.hostname not in ("127.0.0.1", "localhost") or up.scheme != "http":
            raise ValueError(f"OutageProxy only relays to http on loopback, not {upstream_url!r}")
        self.upstream = (up.hostname, up.port or 80)
        self.accepted = 0  # connections accepted, in any mode
        self._mode = "up"
        self._cond = threading.Condition()
        self._conns: set[socket.socket] = set()
        self._hung: set[socket.socket] = set()  # connections that carried bytes during a hang
        self._closed = False
        self._listener: socket.socket | None = None
        # The port stays bound for the proxy's life, listening or not: closed in refuse mode, it
        # was free for any process's outgoing connection to take, and the bind back to "up"
        # failed with EADDRINUSE (suite18 saw it). A bound socket that never listens answers a
        # SYN with a reset, as a dead origin does; SO_REUSEPORT lets the listener share the port.
        self._hold = socket.socket()
        self._hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self._hold.bind(("127.0.0.1", 0))
        self.port = self._hold.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._listen()

    # --- control ---------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        with self._cond:
            old, self._mode = self._mode, mode
            self._cond.notify_all()
        if mode == "refuse" and old != "refuse":
            self._stop_listening()
            self._reset_all()
        elif old == "refuse" and mode != "refuse":
            self._listen()

    def __enter__(self) -> OutageProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._stop_listening()
        self._reset_all()
        self._hold.close()

    # --- plumbing --------------------------------------------------------------------------
    def _listen(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), name="outage-accept", daemon=True).start()

    def _stop_listening(self) -> None:
        sock, self._listener = self._listener, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() below
            except OSError:
                pass
            sock.close()

    def _reset_all(self) -> None:
        with self._cond:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed: refuse mode, or the proxy closed
            self.accepted += 1
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._cond:
                self._conns.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="outage-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._cond:
                    if self._mode == "hang":
                        self._hung.update((src, dst))
                    while self._mode == "stall" and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        break
                    if src in self._hung:
                        continue  # lost: never delivered, never answered
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._cond:
                self._conns.difference_update((src, dst))
                self._hung.difference_update((src, dst))
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
