"""bench/latency_proxy.py: bytes arrive intact, in order, with half-close propagated both
ways, and the server's answers arrive no sooner than the configured latency.

Only lower bounds on time are asserted (a loaded machine may add any delay). Socket
timeouts are generous guards so that a bug fails the test instead of hanging it; no
result depends on them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from bench.latency_proxy import LatencyProxy

LATENCY_MS = 50
GUARD = 60.0  # seconds: only reached if the proxy loses bytes or an end of stream


class EchoServer:
    """Echoes each connection's bytes as they come; at the client's end of stream it ends
    its own (half-close back), then closes. Records what each connection received."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.saw_eof = 0  # connections whose client end of stream (or close) arrived
        self._lock = threading.Condition()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        conn.settimeout(GUARD)
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)
            with self._lock:
                self.saw_eof += 1
                self._lock.notify_all()
            conn.shutdown(socket.SHUT_WR)

    def wait_for_eofs(self, n: int) -> None:
        with self._lock:
            assert self._lock.wait_for(lambda: self.saw_eof >= n, timeout=GUARD), "no end of stream"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def proxy(echo: EchoServer) -> Iterator[LatencyProxy]:
    with LatencyProxy(f"http://127.0.0.1:{echo.port}", LATENCY_MS) as p:
        yield p


def connect(proxy: LatencyProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=GUARD)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, f"connection ended after {len(buf)} of {n} bytes"
        buf += chunk
    return bytes(buf)


def echo_through(proxy: LatencyProxy, payload: bytes, pieces: int) -> bytes:
    """Send ``payload`` in ``pieces`` writes while reading the echo, then half-close and
    read to the end of stream; returns everything received."""
    with connect(proxy) as sock:

        def send() -> None:
            step = max(1, -(-len(payload) // pieces))
            for i in range(0, len(payload), step):
                sock.sendall(payload[i : i + step])
            sock.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        received = bytearray()
        while chunk := sock.recv(1 << 20):
            received += chunk
        sender.join()
        return bytes(received)


def test_url_points_at_the_proxy(proxy: LatencyProxy, echo: EchoServer) -> None:
    assert proxy.url == f"http://127.0.0.1:{proxy.port}"
    assert proxy.port != echo.port


def test_concurrent_connections_large_payload_and_half_close_arrive_intact(
    proxy: LatencyProxy, echo: EchoServer
) -> None:
    """Six connections at once, one of them 8 MiB: each gets exactly its own bytes back,
    in order, and an end of stream after them; each server side saw the client's end of
    stream while its own side was still open (the echo is sent after it)."""
    eof_before = echo.saw_eof
    payloads = [os.urandom(n) for n in (8 << 20, 1 << 20, 300_000, 65_537, 1, 0)]
    results: list[bytes | None] = [None] * len(payloads)

    def run(i: int) -> None:
        results[i] = echo_through(proxy, payloads[i], pieces=1 + i * 7)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (sent, got) in enumerate(zip(payloads, results, strict=True)):
        assert got is not None, f"connection {i} raised"
        assert len(got) == len(sent), f"connection {i}: {len(got)} of {len(sent)} bytes"
        assert got == sent, f"connection {i}: bytes differ"
    assert echo.saw_eof >= eof_before + len(payloads)  # all ended: each echo ended after its EOF


def test_answers_arrive_no_sooner_than_the_latency_on_a_kept_alive_connection(proxy: LatencyProxy) -> None:
    with connect(proxy) as sock:
        for i in range(3):
            message = f"request {i}".encode()
            t0 = time.monotonic()
            sock.sendall(message)
            assert recv_exactly(sock, len(message)) == message
            assert time.monotonic() - t0 >= LATENCY_MS / 1000


def test_server_end_of_stream_comes_back_no_sooner_than_the_latency(proxy: LatencyProxy) -> None:
    """The client's half-close goes through; the server's answer to it (its own end of
    stream) comes back no sooner than the latency."""
    with connect(proxy) as sock:
        sock.sendall(b"x")
        assert recv_exactly(sock, 1) == b"x"
        t0 = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""
        assert time.monotonic() - t0 >= LATENCY_MS / 1000


def test_a_client_close_reaches_the_server(proxy: LatencyProxy, echo: EchoServer) -> None:
    before = echo.saw_eof
    with connect(proxy) as sock:
        sock.sendall(b"bye")
        assert recv_exactly(sock, 3) == b"bye"
    echo.wait_for_eofs(before + 1)


def test_proxy_cpu_is_measured_and_the_process_ends(echo: EchoServer) -> None:
    p = LatencyProxy(f"127.0.0.1:{echo.port}", 0)
    with p:
        assert p.running
        assert echo_through(p, b"hello", pieces=1) == b"hello"
        assert p.cpu_seconds() >= 0.0
    assert not p.running  # no proxy left behind
    assert p.cpu_seconds() >= 0.0


@pytest.mark.parametrize("upstream", ["http://10.1.2.3:80", "example.com:80", "http://127.0.0.1"])
def test_only_loopback_upstreams_with_a_port(upstream: str) -> None:
    with pytest.raises(ValueError, match="latency proxy"):
        LatencyProxy(upstream, 5)
