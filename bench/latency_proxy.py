"""A loopback TCP proxy that delays everything a server sends back by a fixed latency.

Why: on a small VM an S3 server on loopback (moto, Ceph RGW) answers a small GET in about
its own CPU time, on the same cores as the client, so a benchmark of a parallel reader
against a sequential one measures who wins the race for the shared cores. A real object
store is latency-bound instead: tens of milliseconds to the first byte of a small GET
(AWS, "Timeouts and Retries for Latency-Sensitive Applications": median latencies of
requests under 512 KB are often in the tens of ms), with its CPU on other machines. Put
between a client and the loopback server, this proxy adds that latency and nothing else.
``tc netem`` would do it in the kernel, but this kernel is built without
CONFIG_NET_SCH_NETEM.

The model, per proxied connection: bytes from the client are forwarded to the server at
once; bytes from the server reach the client ``latency`` seconds after they reached the
proxy, in one FIFO (never reordered, merged across connections or dropped). End of
stream (half-close) and close travel the same way: the client's at once, the server's
after the delay. A request/response exchange therefore gains ``latency`` (one round trip)
however many requests a keep-alive connection carries. Not modelled: connection setup
(the kernel completes the client's TCP handshake with the proxy at once, where a real
network adds a round trip, TLS more), bandwidth limits, jitter and loss.

Throttling (``--throttle-rps N``, ``LatencyProxy(..., throttle_rps=N)``): one token bucket
for the whole proxy, refilled at N tokens/s and holding at most ``burst`` (default N/10, at
least 1), full at start. Every request takes a token; a request that finds none is not
forwarded: the proxy answers it itself with ``503 SlowDown`` and S3's XML error body, as
an S3 endpoint that throttles does, through the same delayed FIFO (so the client sees it
after ``latency`` too). To answer per request on a kept-alive HTTP/1.1 connection the proxy
parses the client's byte stream enough to find request boundaries (head up to the blank
line, then a ``Content-Length`` body or a chunked one; the body of a rejected request is
read and dropped, so the connection stays usable). A rejected request that carries
``Expect: 100-continue`` gets its 503 with ``Connection: close`` (the client may or may not
send its body then). A request the parser cannot follow (a head over 64 KiB, a body length
it cannot tell) switches that connection to plain forwarding. Responses are not parsed:
the 503 is queued behind whatever the server sent before, which keeps the order for clients
that wait for a response before sending the next request (boto3, rclone, s3fs, curl; none
pipelines). ``stats()`` gives the number of requests seen and answered 503.

Injected faults (``--control-stdin``, ``LatencyProxy(..., control=True).inject(...)``): a
chaos run (bench/soak) turns the origin bad for a while by writing lines to the proxy's
stdin: ``fail SECONDS`` answers every request ``503 SlowDown`` (as above) for that long
(a 503 burst); ``latency MS SECONDS`` adds MS to the delay of what the server sends for
that long (a latency spike; several seconds of it is a stalled origin). Bytes queued
before a spike ends keep their later release time, so nothing is reordered.

``--listen`` binds another address than 127.0.0.1: a private address of a test network
the caller made itself (a network namespace), never a public one; the upstream stays
loopback, so the proxy can sit in front of a server inside such a namespace.

It runs as its own process (``LatencyProxy``) so that its CPU is neither the benchmark's
``process_time`` nor under its GIL; ``cpu_seconds()`` gives that CPU so a benchmark can
report it apart, as infrastructure. The process exits when its parent closes its stdin
(or dies), so a crashed benchmark leaves no proxy running. Only loopback upstreams are
accepted. Standard library only: usable from any bench, and as a script::

    python bench/latency_proxy.py --upstream 127.0.0.1:9000 --latency-ms 20
    python bench/latency_proxy.py --upstream 127.0.0.1:9000 --latency-ms 10 --throttle-rps 200
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import cast
from urllib.parse import urlsplit, urlunsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_EOF = object()  # the server half-closed: write_eof to the client
_CLOSE = object()  # the server's connection is gone: close the client's


def _require_loopback(host: str, what: str) -> None:
    if host not in LOOPBACK:
        raise ValueError(f"the latency proxy only forwards to loopback, not {what!r}: use 127.0.0.1")


def _require_private(host: str) -> None:
    """The listen address: loopback, or a private address of a test network (never public)."""
    if host in LOOPBACK:
        return
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"the latency proxy listens on an IP address, not {host!r}") from None
    if not addr.is_private or addr.is_unspecified:
        raise ValueError(
            f"the latency proxy listens only on loopback or a private test address, not {host!r}"
        )


class Faults:
    """Faults injected into the origin for a while (``fail``: 503 to every request;
    ``latency``: extra delay of what the server sends). ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.fail_until = 0.0
        self.extra = 0.0
        self.extra_until = 0.0
        self.failed = 0

    def command(self, line: str) -> None:
        """``fail SECONDS`` or ``latency MS SECONDS``; a bad line raises ValueError."""
        words = line.split()
        now = self.clock()
        if len(words) == 2 and words[0] == "fail":
            self.fail_until = max(self.fail_until, now + float(words[1]))
        elif len(words) == 3 and words[0] == "latency":
            self.extra, self.extra_until = float(words[1]) / 1000, now + float(words[2])
        else:
            raise ValueError(f"latency proxy: unknown control line {line!r} (fail S | latency MS S)")

    def failing(self) -> bool:
        if self.clock() < self.fail_until:
            self.failed += 1
            return True
        return False

    def extra_latency(self) -> float:
        return self.extra if self.clock() < self.extra_until else 0.0


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` held, full at start; shared by every
    connection of one proxy. ``clock`` is injectable so a test needs no sleeping."""

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        if rate <= 0:
            raise ValueError(f"latency proxy: throttle rate {rate} requests/s must be positive")
        self.rate = rate
        self.burst = max(1.0, rate / 10) if burst is None else burst
        if self.burst < 1:
            raise ValueError(f"latency proxy: throttle burst {self.burst} must be at least 1 request")
        self.clock = clock
        self.tokens = self.burst
        self.stamp = clock()

    def take(self) -> bool:
        """One token if there is one (True: forward the request), else False (throttle it)."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


MAX_HEAD = 64 * 1024  # a longer request head: stop parsing, forward the rest as it is


def slow_down_response(method: bytes, close: bool) -> bytes:
    """S3's answer to a request above its rate: ``503 Slow Down`` with the XML error body
    (no body bytes for HEAD, as HTTP wants)."""
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
        "<Message>Please reduce your request rate.</Message>"
        f"<RequestId>{request_id}</RequestId><HostId>latency-proxy</HostId></Error>"
    ).encode()
    head = (
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nx-amz-request-id: {request_id}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    ).encode()
    return head if method == b"HEAD" else head + body


class RequestGate:
    """Splits one connection's client-to-server bytes into HTTP/1.1 requests and lets each
    through or not, by ``admit()`` (a token bucket's ``take``).

    ``feed(data)`` returns what to do, in order: ``("forward", bytes)`` to send upstream,
    ``("reject", method, close)`` to answer one request with a 503 (``close``: then close
    the connection; everything after it is dropped). No I/O here: the proxy (and a test)
    act on the list.
    """

    def __init__(self, admit: Callable[[], bool]) -> None:
        self.admit = admit
        self.buf = bytearray()  # bytes not yet decided (an incomplete head or chunk-size line)
        self.state = "head"  # head | length | chunk_size | chunk_data | trailer | passthrough | closed
        self.left = 0  # body bytes left (length) or chunk bytes + CRLF left (chunk_data)
        self.forwarding = True  # the current request's body goes upstream (else it is dropped)
        self.requests = 0
        self.rejected = 0

    def feed(self, data: bytes) -> list[tuple]:
        out: list[tuple] = []
        if self.state == "closed":
            return out
        if self.state == "passthrough":
            return [("forward", data)] if data else out
        self.buf += data
        while self.buf and self.state not in ("closed", "passthrough"):
            if not self._step(out):
                break  # need more bytes
        if self.state == "passthrough" and self.buf:
            self._emit(out, bytes(self.buf), forward=True)
            self.buf.clear()
        return out

    def _emit(self, out: list[tuple], data: bytes, forward: bool) -> None:
        if not forward or not data:
            return
        if out and out[-1][0] == "forward":
            out[-1] = ("forward", out[-1][1] + data)
        else:
            out.append(("forward", data))

    def _body(self, out: list[tuple], n: int) -> None:
        """Pass on (or drop) the next ``n`` buffered bytes of a body."""
        self._emit(out, bytes(self.buf[:n]), self.forwarding)
        del self.buf[:n]

    def _step(self, out: list[tuple]) -> bool:
        """Consume one unit (a head, a body piece, a chunk line); False if bytes are missing."""
        if self.state == "head":
            if self.buf.startswith(b"\r\n"):  # stray CRLF between requests (RFC 9112 2.2)
                self._emit(out, b"\r\n", True)
                del self.buf[:2]
                return True
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self.state = "passthrough"
                return False
            head = bytes(self.buf[: end + 4])
            del self.buf[: end + 4]
            self._head(out, head)
            return True
        if self.state == "length":
            n = min(self.left, len(self.buf))
            self._body(out, n)
            self.left -= n
            if self.left == 0:
                self.state = "head"
            return True
        if self.state in ("chunk_size", "trailer"):
            end = self.buf.find(b"\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self.state = "passthrough"
                return False
            line = bytes(self.buf[: end + 2])
            self._body(out, end + 2)
            if self.state == "trailer":
                if line == b"\r\n":
                    self.state = "head"
                return True
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.state = "passthrough"
                return True
            if size == 0:
                self.state = "trailer"
            else:
                self.state, self.left = "chunk_data", size + 2  # the data and its CRLF
            return True
        if self.state == "chunk_data":
            n = min(self.left, len(self.buf))
            self._body(out, n)
            self.left -= n
            if self.left == 0:
                self.state = "chunk_size"
            return True
        raise AssertionError(self.state)

    def _head(self, out: list[tuple], head: bytes) -> None:
        lines = head[:-4].split(b"\r\n")
        method = lines[0].split(b" ", 1)[0]
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        self.requests += 1
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"")
        length_text = headers.get(b"content-length", b"0")
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        understood = chunked or length >= 0
        admitted = self.admit() if understood else True
        self.forwarding = admitted
        if admitted:
            self._emit(out, head, True)
        else:
            self.rejected += 1
            close = headers.get(b"expect", b"") == b"100-continue"
            out.append(("reject", method, close))
            if close:
                self.state = "closed"
                self.buf.clear()
                return
        if not understood:
            self.state = "passthrough"
        elif chunked:
            self.state = "chunk_size"
        elif length > 0:
            self.state, self.left = "length", length
        else:
            self.state = "head"


class _Pipe:
    """One proxied connection: both transports and the delayed server-to-client FIFO."""

    def __init__(self, loop: asyncio.AbstractEventLoop, latency: float, faults: Faults | None = None) -> None:
        self.loop = loop
        self.latency = latency
        self.faults = faults
        self.client: asyncio.Transport | None = None
        self.server: asyncio.Transport | None = None
        self.pending: deque[tuple[float, object]] = deque()  # (release time, bytes | _EOF | _CLOSE)
        self.timer: asyncio.TimerHandle | None = None
        self.client_eof = False  # the client half-closed (already passed on to the server)
        self.server_eof_sent = False  # the server's half-close reached the client
        self.closed = False

    # server -> client, delayed ------------------------------------------------------------
    def delay(self, item: object) -> None:
        if self.closed:
            return
        extra = self.faults.extra_latency() if self.faults is not None else 0.0
        release = self.loop.time() + self.latency + extra
        if self.pending and release < self.pending[-1][0]:
            release = self.pending[-1][0]  # after a spike: never before what is queued (FIFO)
        self.pending.append((release, item))
        if self.timer is None:
            self.timer = self.loop.call_at(self.pending[0][0], self.release)

    def release(self) -> None:
        """Send everything due, in order; wake up again for the next item.

        An asyncio timer may fire a clock tick early, so every item is checked against the
        clock: nothing is ever released before ``latency`` has passed.
        """
        self.timer = None
        now = self.loop.time()
        client = self.client
        due: list[bytes] = []  # consecutive due chunks go out in one write
        while self.pending and self.pending[0][0] <= now:
            item = self.pending.popleft()[1]
            if client is None or client.is_closing():
                continue
            if isinstance(item, bytes):
                due.append(item)
                continue
            if due:
                client.write(b"".join(due))
                due.clear()
            if item is _EOF:
                self.server_eof_sent = True
                if client.can_write_eof():
                    try:
                        client.write_eof()
                    except OSError:  # the client reset the connection meanwhile (ENOTCONN)
                        self.close_all()
                        return
                self.finish_if_done()
            else:  # _CLOSE
                client.close()
        if due and client is not None and not client.is_closing():
            client.write(due[0] if len(due) == 1 else b"".join(due))
        if self.pending:
            self.timer = self.loop.call_at(self.pending[0][0], self.release)

    # both ways -----------------------------------------------------------------------------
    def finish_if_done(self) -> None:
        if self.client_eof and self.server_eof_sent:
            self.close_all()

    def close_all(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.pending.clear()
        for transport in (self.client, self.server):
            if transport is not None and not transport.is_closing():
                transport.close()


class Throttle:
    """The proxy-wide token bucket plus counts of the requests it saw and answered 503."""

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket
        self.requests = 0
        self.throttled = 0

    def admit(self) -> bool:
        self.requests += 1
        if self.bucket.take():
            return True
        self.throttled += 1
        return False

    def stats(self) -> dict[str, int]:
        return {"requests": self.requests, "throttled": self.throttled}


class _ClientSide(asyncio.Protocol):
    """The accepted connection: connects upstream, then forwards the client's bytes at once
    (with a ``throttle``: request by request, answering 503 SlowDown to those above the rate)."""

    def __init__(
        self,
        upstream: tuple[str, int],
        latency: float,
        throttle: Throttle | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.upstream = upstream
        self.latency = latency
        self.faults = faults
        self.pipe: _Pipe | None = None
        self.gate = None
        if faults is not None:

            def admit() -> bool:
                return not faults.failing() and (throttle is None or throttle.admit())

            self.gate = RequestGate(admit)
        elif throttle is not None:
            self.gate = RequestGate(throttle.admit)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        self.pipe = pipe = _Pipe(loop, self.latency, self.faults)
        pipe.client = cast(asyncio.Transport, transport)
        pipe.client.pause_reading()  # until the upstream connection is up
        loop.create_task(self._connect(pipe))

    async def _connect(self, pipe: _Pipe) -> None:
        loop = asyncio.get_running_loop()
        try:
            server, _ = await loop.create_connection(lambda: _ServerSide(pipe), *self.upstream)
        except OSError:
            pipe.close_all()  # the client sees its connection closed, as if refused
            return
        assert pipe.client is not None
        if pipe.client.is_closing():
            server.close()
            return
        pipe.server = server
        pipe.client.resume_reading()

    def data_received(self, data: bytes) -> None:
        server = self.pipe.server if self.pipe is not None else None
        if self.gate is None:
            if server is not None and not server.is_closing():
                server.write(data)
            return
        pipe = self.pipe
        assert pipe is not None
        for action in self.gate.feed(data):
            if action[0] == "forward":
                if server is not None and not server.is_closing():
                    server.write(action[1])
                continue
            _, method, close = action
            pipe.delay(slow_down_response(method, close))
            if close:
                pipe.delay(_CLOSE)
                if server is not None:
                    server.close()

    def eof_received(self) -> bool:
        pipe = self.pipe
        assert pipe is not None
        pipe.client_eof = True
        if pipe.server is not None and not pipe.server.is_closing() and pipe.server.can_write_eof():
            pipe.server.write_eof()
        pipe.finish_if_done()
        return True  # keep the client's side open: the server may still answer

    def connection_lost(self, exc: Exception | None) -> None:
        if self.pipe is not None:
            self.pipe.close_all()

    # the client reads slower than the server sends: stop reading the server
    def pause_writing(self) -> None:
        if self.pipe is not None and self.pipe.server is not None:
            self.pipe.server.pause_reading()

    def resume_writing(self) -> None:
        if self.pipe is not None and self.pipe.server is not None:
            self.pipe.server.resume_reading()


class _ServerSide(asyncio.Protocol):
    """The upstream connection: everything it sends goes through the delayed FIFO."""

    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe

    def data_received(self, data: bytes) -> None:
        self.pipe.delay(data)

    def eof_received(self) -> bool:
        self.pipe.delay(_EOF)
        return True  # keep the server's side open: the client may still be sending

    def connection_lost(self, exc: Exception | None) -> None:
        self.pipe.delay(_CLOSE)

    # the server reads slower than the client sends: stop reading the client
    def pause_writing(self) -> None:
        if self.pipe.client is not None:
            self.pipe.client.pause_reading()

    def resume_writing(self) -> None:
        if self.pipe.client is not None:
            self.pipe.client.resume_reading()


class _StdinWatcher(asyncio.Protocol):
    """Stops the proxy at the end of stdin; with ``faults``, each line is a control command."""

    def __init__(self, stop: asyncio.Event, faults: Faults | None = None) -> None:
        self.stop = stop
        self.faults = faults
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        if self.faults is None:
            return
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                self.faults.command(line.decode())
            except ValueError as exc:
                print(f"error {exc}", file=sys.stderr, flush=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop.set()


async def serve(
    upstream: tuple[str, int],
    latency: float,
    port: int = 0,
    exit_on_stdin_eof: bool = False,
    throttle_rps: float | None = None,
    throttle_burst: float | None = None,
    listen: str = "127.0.0.1",
    control: bool = False,
) -> None:
    """Proxy ``listen``:``port`` (0: any free port) to ``upstream`` until stopped.

    With ``control``, stdin lines inject faults (see the module docstring; implies stopping
    at the end of stdin). Prints ``listening HOST:PORT`` once it accepts connections (how ``LatencyProxy``
    learns the port). With ``throttle_rps``, prints ``stats {json}`` (requests seen, answered
    503) on SIGUSR1 and when it stops. Stops on SIGTERM, or when stdin reaches its end if
    ``exit_on_stdin_eof``.
    """
    _require_loopback(upstream[0], upstream[0])
    _require_private(listen)
    loop = asyncio.get_running_loop()
    faults = Faults() if control else None
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    throttle = Throttle(TokenBucket(throttle_rps, throttle_burst)) if throttle_rps else None

    def print_stats() -> None:
        stats = throttle.stats() if throttle else {}
        if faults is not None:
            stats["failed"] = faults.failed
        print("stats " + json.dumps(stats), flush=True)

    loop.add_signal_handler(signal.SIGUSR1, print_stats)
    if exit_on_stdin_eof or control:
        await loop.connect_read_pipe(lambda: _StdinWatcher(stop, faults), sys.stdin)
    server = await loop.create_server(lambda: _ClientSide(upstream, latency, throttle, faults), listen, port)
    print(f"listening {listen}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await stop.wait()
    print_stats()


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _parse_stats(line: str) -> dict[str, int]:
    if not line.startswith("stats "):
        raise RuntimeError(f"the latency proxy answered {line!r} to a stats request")
    return json.loads(line[len("stats ") :])


class LatencyProxy:
    """A latency proxy in a child process, in front of a loopback ``upstream``.

    ``upstream`` is ``http://127.0.0.1:PORT`` (then ``url`` is the same URL pointing at the
    proxy) or ``127.0.0.1:PORT``. Use as a context manager; ``pid`` lets a caller leave the
    proxy out of its own accounting of child processes. ``throttle_rps``: answer 503
    SlowDown above that many requests/s (``throttle_burst`` held at most; see the module
    docstring); ``stats()`` counts them. ``control``: ``inject("fail S")`` / ``inject("latency
    MS S")`` break the origin for a while; ``listen``: a private test address instead of
    127.0.0.1; ``argv_prefix``: run the proxy under e.g. ``nsenter --net=…`` (inside a test
    host's namespace); ``port``: a fixed port (0: any free one).
    """

    def __init__(
        self,
        upstream: str,
        latency_ms: float,
        throttle_rps: float | None = None,
        throttle_burst: float | None = None,
        *,
        listen: str = "127.0.0.1",
        control: bool = False,
        argv_prefix: Sequence[str] = (),
        port: int = 0,
    ) -> None:
        parts = urlsplit(upstream if "//" in upstream else f"//{upstream}")
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"latency proxy upstream {upstream!r}: give host:port or a URL with a port")
        _require_loopback(parts.hostname, upstream)
        _require_private(listen)
        if latency_ms < 0:
            raise ValueError(f"latency proxy: latency {latency_ms} ms is negative")
        if throttle_rps is not None:
            TokenBucket(throttle_rps, throttle_burst)  # the same checks as the child's, here
        self._parts = parts
        self.upstream = (parts.hostname, parts.port)
        self.latency_ms = latency_ms
        self.throttle_rps = throttle_rps
        self.throttle_burst = throttle_burst
        self.listen = listen
        self.control = control
        self.argv_prefix = list(argv_prefix)
        self._final_stats: dict[str, int] | None = None
        self.port = port
        self._proc: subprocess.Popen[str] | None = None
        self._final_cpu: float | None = None

    @property
    def url(self) -> str:
        """The upstream URL with the proxy's address in place of the server's."""
        return urlunsplit(self._parts._replace(netloc=f"{self.listen}:{self.port}"))

    @property
    def pid(self) -> int:
        assert self._proc is not None, "the latency proxy is not started"
        return self._proc.pid

    def start(self) -> LatencyProxy:
        cmd = [*self.argv_prefix, sys.executable, os.path.abspath(__file__)]
        cmd += ["--upstream", "{}:{}".format(*self.upstream)]
        cmd += ["--latency-ms", repr(self.latency_ms), "--exit-on-stdin-eof", "--listen", self.listen]
        if self.control:
            cmd.append("--control-stdin")
        if self.port:
            cmd += ["--port", str(self.port)]
        if self.throttle_rps is not None:
            cmd += ["--throttle-rps", repr(self.throttle_rps)]
        if self.throttle_burst is not None:
            cmd += ["--throttle-burst", repr(self.throttle_burst)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # blocks until it listens, or exits
        if not line.startswith("listening "):
            self.stop()
            raise RuntimeError(
                f"the latency proxy to {self.upstream} did not start (exit {self._proc.returncode}); "
                "its error is on stderr above"
            )
        self.port = int(line.rsplit(":", 1)[1])
        return self

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def inject(self, line: str) -> None:
        """Send a control line (``fail S``, ``latency MS S``); needs ``control=True``."""
        assert self.control and self._proc is not None and self._proc.stdin is not None
        Faults().command(line)  # a bad line fails here, in the caller
        self._proc.stdin.write(line.strip() + "\n")
        self._proc.stdin.flush()

    def cpu_seconds(self) -> float:
        """CPU (user + system) the proxy process has used so far, or in all once stopped."""
        if self._final_cpu is not None:
            return self._final_cpu
        return _cpu_of(self.pid)

    def stats(self) -> dict[str, int]:
        """Requests seen and answered 503 so far (all, once stopped); ``{}`` unthrottled."""
        if self._final_stats is not None:
            return self._final_stats
        assert self._proc is not None and self._proc.stdout is not None, "the latency proxy is not started"
        os.kill(self._proc.pid, signal.SIGUSR1)
        return _parse_stats(self._proc.stdout.readline())

    def stop(self) -> None:
        """Close its stdin (it exits), wait; SIGKILL only if it does not exit in 10 s."""
        proc = self._proc
        if proc is None or self._final_cpu is not None:
            return
        try:
            self._final_cpu = _cpu_of(proc.pid) if proc.poll() is None else 0.0
        except OSError:
            self._final_cpu = 0.0
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        lines = [line for line in proc.stdout.read().splitlines() if line.startswith("stats ")]
        self._final_stats = _parse_stats(lines[-1]) if lines else {}
        proc.stdout.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT on loopback")
    ap.add_argument("--latency-ms", type=float, required=True, help="delay of server-to-client bytes")
    ap.add_argument("--port", type=int, default=0, help="port to listen on, 127.0.0.1 (0: any free one)")
    ap.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when stdin reaches its end")
    ap.add_argument("--throttle-rps", type=float, help="answer 503 SlowDown above this many requests/s")
    ap.add_argument("--throttle-burst", type=float, help="requests the bucket holds (default rps/10, >= 1)")
    ap.add_argument(
        "--listen", default="127.0.0.1", help="address to listen on: loopback or a private test address"
    )
    ap.add_argument(
        "--control-stdin", action="store_true", help="stdin lines inject faults: fail S | latency MS S"
    )
    args = ap.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    _require_loopback(host, args.upstream)
    _require_private(args.listen)
    # Ctrl-C in a terminal reaches the whole process group: the parent stops the proxy.
    if args.exit_on_stdin_eof or args.control_stdin:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.throttle_rps is not None:
        TokenBucket(args.throttle_rps, args.throttle_burst)  # bad values: a clear error before listening
    asyncio.run(
        serve(
            (host, int(port)),
            args.latency_ms / 1000,
            args.port,
            args.exit_on_stdin_eof,
            args.throttle_rps,
            args.throttle_burst,
            args.listen,
            args.control_stdin,
        )
    )


if __name__ == "__main__":
    main()
