"""bench/latency_proxy.py throttling: above the token bucket's rate the proxy answers
``503 SlowDown`` itself, request by request on a kept-alive connection, and lets the rest
through untouched.

No result depends on time: the bucket either holds enough tokens for every request
(burst >= requests) or refills so slowly (one token per 1,000 s) that nothing is refilled
during a test. The parser is checked on every way of cutting the byte stream.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from bench.latency_proxy import LatencyProxy, RequestGate, TokenBucket
from tests.servers import S3Endpoint

GUARD = 60.0  # socket timeout: only reached if the proxy loses a request or an answer
NEVER_REFILLS = 0.001  # requests/s: one token per 1,000 s


class Recorder(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive server: answers 200 with ``METHOD PATH BODY`` and records it."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        body = b""
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        reply = f"{self.command} {self.path} ".encode() + body
        self.server.seen.append((self.command, self.path, body, self.client_address))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply)

    do_GET = do_PUT = do_POST = do_HEAD = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def proxy_to(server: ThreadingHTTPServer, rps: float, burst: float) -> LatencyProxy:
    return LatencyProxy(
        f"http://127.0.0.1:{server.server_address[1]}", 0, throttle_rps=rps, throttle_burst=burst
    )


def request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None, **kw):
    conn.request(method, path, body=body, **kw)
    response = conn.getresponse()
    return response.status, response.read(), response


# the gate alone: request boundaries ------------------------------------------------------

REQUESTS = [
    b"GET /b/k1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"PUT /b/k2 HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world",
    b"POST /b/k3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nabcde\r\n3\r\nfgh\r\n0\r\nX-Trailer: 1\r\n\r\n",
    b"\r\nHEAD /b/k4 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"DELETE /b/k5 HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n",
]
STREAM = b"".join(REQUESTS)


def run_gate(verdicts: list[bool], cuts: list[int]) -> tuple[bytes, list[tuple]]:
    answers = iter(verdicts)
    gate = RequestGate(lambda: next(answers))
    forwarded, rejected = b"", []
    bounds = [0, *cuts, len(STREAM)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        for action in gate.feed(STREAM[start:end]):
            if action[0] == "forward":
                forwarded += action[1]
            else:
                rejected.append(action)
    assert gate.requests == len(REQUESTS)
    return forwarded, rejected


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_the_gate_finds_every_request_wherever_the_bytes_are_cut(cut: int) -> None:
    """Requests 2 (a Content-Length body) and 3 (a chunked body with a trailer) rejected:
    exactly the other requests' bytes go upstream, in order, and the two rejections come
    out in order, whether the stream arrives whole, in two pieces or byte by byte."""
    verdicts = [True, False, False, True, True]
    expected = REQUESTS[0] + REQUESTS[3] + REQUESTS[4]
    for cuts in ([cut], list(range(1, len(STREAM))) if cut == 1 else [cut, min(cut + 7, len(STREAM) - 1)]):
        forwarded, rejected = run_gate(verdicts, sorted(set(cuts)))
        assert forwarded == expected
        assert rejected == [("reject", b"PUT", False), ("reject", b"POST", False)]


def test_a_rejected_request_expecting_100_continue_closes_the_connection() -> None:
    gate = RequestGate(lambda: False)
    head = b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
    assert gate.feed(head) == [("reject", b"PUT", True)]
    assert gate.feed(b"helloGET /b/k HTTP/1.1\r\n\r\n") == []  # nothing after it goes anywhere


def test_a_body_of_unknown_length_switches_the_connection_to_plain_forwarding() -> None:
    gate = RequestGate(lambda: False)
    head = b"PUT /b/k HTTP/1.1\r\nContent-Length: lots\r\n\r\nbody"
    assert gate.feed(head) == [("forward", head)]
    assert gate.feed(b"GET / HTTP/1.1\r\n\r\n") == [("forward", b"GET / HTTP/1.1\r\n\r\n")]


def test_the_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    now = [100.0]
    bucket = TokenBucket(8, burst=2, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    now[0] += 0.125  # one token (exact in binary)
    assert [bucket.take(), bucket.take()] == [True, False]
    now[0] += 60  # never more than the burst
    assert [bucket.take() for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize(("rps", "burst"), [(0, None), (-1, None), (5, 0.5)])
def test_bad_throttle_settings_are_refused(rps: float, burst: float | None) -> None:
    with pytest.raises(ValueError, match="latency proxy: throttle"):
        LatencyProxy("127.0.0.1:9", 0, throttle_rps=rps, throttle_burst=burst)


# a real proxy, real sockets, real requests -----------------------------------------------


def test_above_the_rate_requests_get_503_slowdown_on_the_same_connection(
    upstream: ThreadingHTTPServer,
) -> None:
    """Burst 3, no refill: of 8 requests on one kept-alive connection (GET, PUT with a body,
    chunked POST, HEAD), the first 3 reach the server and the other 5 are answered 503 with
    S3's SlowDown body (none for HEAD); the connection stays usable throughout."""
    upstream.seen.clear()  # type: ignore[attr-defined]
    calls = [
        ("GET", "/b/a", None, {}),
        ("PUT", "/b/b", b"x" * 70_000, {}),
        ("POST", "/b/c", iter([b"ab", b"cd"]), {"encode_chunked": True}),
        ("PUT", "/b/d", b"y" * 70_000, {}),
        ("POST", "/b/e", iter([b"ef", b"gh"]), {"encode_chunked": True}),
        ("HEAD", "/b/f", None, {}),
        ("GET", "/b/g", None, {}),
        ("GET", "/b/h", None, {}),
    ]
    with proxy_to(upstream, NEVER_REFILLS, 3) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=GUARD)
        results = [request(conn, method, path, body, **kw) for method, path, body, kw in calls]
        socket_before = conn.sock
        assert socket_before is not None  # still open: never closed by an answer
        stats = proxy.stats()
        conn.close()
    assert [status for status, _, _ in results] == [200, 200, 200, 503, 503, 503, 503, 503]
    assert results[1][1] == b"PUT /b/b " + b"x" * 70_000
    assert results[2][1] == b"POST /b/c abcd"
    for _status, body, response in results[3:]:
        assert response.reason == "Slow Down"
        assert response.getheader("Content-Type") == "application/xml"
        if response._method == "HEAD":
            assert body == b""
        else:
            assert b"<Code>SlowDown</Code>" in body
    seen = upstream.seen  # type: ignore[attr-defined]
    assert [(m, p) for m, p, _, _ in seen] == [("GET", "/b/a"), ("PUT", "/b/b"), ("POST", "/b/c")]
    assert len({addr for _, _, _, addr in seen}) == 1  # one upstream connection for all
    assert stats == {"requests": 8, "throttled": 5}
    assert proxy.stats() == stats  # the final count, after it stopped


def test_below_the_rate_every_request_passes(upstream: ThreadingHTTPServer) -> None:
    """A burst of 100 covers all 60 requests on 3 connections: no 503, all reach the server."""
    upstream.seen.clear()  # type: ignore[attr-defined]
    with proxy_to(upstream, 1000, 100) as proxy:
        statuses = []
        for c in range(3):
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=GUARD)
            for i in range(20):
                status, body, _ = request(conn, "PUT", f"/b/{c}/{i}", f"{c}-{i}".encode())
                assert body == f"PUT /b/{c}/{i} {c}-{i}".encode()
                statuses.append(status)
            conn.close()
    assert statuses == [200] * 60
    assert len(upstream.seen) == 60  # type: ignore[attr-defined]
    assert proxy.stats() == {"requests": 60, "throttled": 0}


def test_boto3_reads_the_503_as_s3_slowdown(moto_endpoint: S3Endpoint) -> None:
    """In front of a real S3 server (moto), boto3 sees the throttled answer as the S3 error
    SlowDown, HTTP 503, and the object reads once a token is there again."""
    bucket = moto_endpoint.new_bucket("throttle")
    moto_endpoint.client().put_object(Bucket=bucket, Key="k", Body=b"payload")
    with LatencyProxy(moto_endpoint.url, 0, throttle_rps=NEVER_REFILLS, throttle_burst=2) as proxy:
        s3 = boto3.client(
            "s3",
            endpoint_url=proxy.url,
            aws_access_key_id=moto_endpoint.access_key,
            aws_secret_access_key=moto_endpoint.secret_key,
            region_name="us-east-1",
            config=BotoConfig(
                s3={"addressing_style": "path"}, retries={"total_max_attempts": 1, "mode": "standard"}
            ),
        )
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"payload"
        assert s3.head_object(Bucket=bucket, Key="k")["ContentLength"] == 7
        with pytest.raises(ClientError) as err:
            s3.get_object(Bucket=bucket, Key="k")
        assert err.value.response["Error"]["Code"] == "SlowDown"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        with pytest.raises(ClientError) as err:
            s3.head_object(Bucket=bucket, Key="k")
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert proxy.stats() == {"requests": 4, "throttled": 2}
