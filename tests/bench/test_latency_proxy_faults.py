"""bench/latency_proxy.py injected faults (the chaos soak's origin faults): ``fail S`` makes
the proxy answer 503 SlowDown to every request for S seconds, ``latency MS S`` delays what
the server sends; a spike never reorders bytes. The listen address may be private, never
public. Time is an injected clock where a result would depend on it; the end-to-end test
injects a burst far longer than the test (3,600 s), so nothing expires during it.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import struct
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from bench.latency_proxy import _EOF, Faults, LatencyProxy, _Pipe, _require_private
from tests.bench.test_latency_proxy_throttle import Recorder

GUARD = 60.0  # socket timeout: only reached if the proxy loses a request or an answer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_fails_every_request_until_it_ends() -> None:
    clock = Clock()
    faults = Faults(clock)
    assert not faults.failing()
    faults.command("fail 5")
    assert faults.failing() and faults.failing()
    clock.now += 5.0
    assert not faults.failing()
    assert faults.failed == 2


def test_a_latency_spike_lasts_its_seconds() -> None:
    clock = Clock()
    faults = Faults(clock)
    faults.command("latency 2500 3")
    assert faults.extra_latency() == 2.5
    clock.now += 3.0
    assert faults.extra_latency() == 0.0


@pytest.mark.parametrize("line", ["", "fail", "fail x", "latency 10", "stall 3", "latency a b"])
def test_a_bad_control_line_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        Faults().command(line)


@pytest.mark.parametrize("addr", ["127.0.0.1", "10.213.0.10", "192.168.7.1"])
def test_loopback_and_private_listen_addresses_are_allowed(addr: str) -> None:
    _require_private(addr)


@pytest.mark.parametrize("addr", ["8.8.8.8", "0.0.0.0", "example.com", "1.1.1.1"])
def test_public_or_wildcard_listen_addresses_are_refused(addr: str) -> None:
    with pytest.raises(ValueError):
        _require_private(addr)


@pytest.fixture()
def upstream() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_injected_burst_answers_503_and_the_server_sees_nothing(upstream: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{upstream.server_address[1]}"
    with LatencyProxy(url, 0, control=True) as proxy:
        assert get(proxy.port, "/before") == (200, b"GET /before ")
        proxy.inject("fail 3600")
        status, body = 0, b""
        for _ in range(200):  # the line reaches the proxy's loop asynchronously
            status, body = get(proxy.port, "/during")
            if status == 503:
                break
        assert status == 503 and b"<Code>SlowDown</Code>" in body
        seen = [path for _, path, _, _ in upstream.seen]  # type: ignore[attr-defined]
        assert seen.count("/during") < 200 and seen[0] == "/before"
        stats = proxy.stats()
    assert stats["failed"] >= 1


def test_inject_refuses_a_bad_line_in_the_caller(upstream: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{upstream.server_address[1]}"
    with LatencyProxy(url, 0, control=True) as proxy, pytest.raises(ValueError):
        proxy.inject("explode")


def test_a_client_reset_before_the_servers_eof_closes_the_pipe_quietly() -> None:
    """Found by the soak (seed 1): a client that reset its connection (a node cut off, a
    killed daemon) before the delayed end-of-stream was released made ``write_eof`` raise
    ENOTCONN inside the timer callback; the pipe was never closed or cleaned up."""

    async def scenario() -> tuple[list[dict], _Pipe]:
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        with socket.socket() as lsock:
            lsock.bind(("127.0.0.1", 0))
            lsock.listen()
            transport, _ = await loop.create_connection(asyncio.Protocol, *lsock.getsockname())
            peer, _ = lsock.accept()
        transport.pause_reading()  # the reset is not noticed by reading: only the EOF meets it
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # RST
        pipe = _Pipe(loop, 0.0)
        pipe.client = transport
        pipe.delay(_EOF)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if pipe.closed or errors:
                break
        transport.abort()
        return errors, pipe

    errors, pipe = asyncio.run(scenario())
    assert errors == []
    assert pipe.closed
