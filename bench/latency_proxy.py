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

It runs as its own process (``LatencyProxy``) so that its CPU is neither the benchmark's
``process_time`` nor under its GIL; ``cpu_seconds()`` gives that CPU so a benchmark can
report it apart, as infrastructure. The process exits when its parent closes its stdin
(or dies), so a crashed benchmark leaves no proxy running. Only loopback upstreams are
accepted. Standard library only: usable from any bench, and as a script::

    python bench/latency_proxy.py --upstream 127.0.0.1:9000 --latency-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from collections import deque
from typing import cast
from urllib.parse import urlsplit, urlunsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_EOF = object()  # the server half-closed: write_eof to the client
_CLOSE = object()  # the server's connection is gone: close the client's


def _require_loopback(host: str, what: str) -> None:
    if host not in LOOPBACK:
        raise ValueError(f"the latency proxy only forwards to loopback, not {what!r}: use 127.0.0.1")


class _Pipe:
    """One proxied connection: both transports and the delayed server-to-client FIFO."""

    def __init__(self, loop: asyncio.AbstractEventLoop, latency: float) -> None:
        self.loop = loop
        self.latency = latency
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
        self.pending.append((self.loop.time() + self.latency, item))
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
                    client.write_eof()
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


class _ClientSide(asyncio.Protocol):
    """The accepted connection: connects upstream, then forwards the client's bytes at once."""

    def __init__(self, upstream: tuple[str, int], latency: float) -> None:
        self.upstream = upstream
        self.latency = latency
        self.pipe: _Pipe | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        self.pipe = pipe = _Pipe(loop, self.latency)
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
        if server is not None and not server.is_closing():
            server.write(data)

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
    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop.set()


async def serve(
    upstream: tuple[str, int], latency: float, port: int = 0, exit_on_stdin_eof: bool = False
) -> None:
    """Proxy 127.0.0.1:``port`` (0: any free port) to ``upstream`` until stopped.

    Prints ``listening 127.0.0.1:PORT`` once it accepts connections (how ``LatencyProxy``
    learns the port). Stops on SIGTERM, or when stdin reaches its end if
    ``exit_on_stdin_eof``.
    """
    _require_loopback(upstream[0], upstream[0])
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if exit_on_stdin_eof:
        await loop.connect_read_pipe(lambda: _StdinWatcher(stop), sys.stdin)
    server = await loop.create_server(lambda: _ClientSide(upstream, latency), "127.0.0.1", port)
    print(f"listening 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await stop.wait()


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LatencyProxy:
    """A latency proxy in a child process, in front of a loopback ``upstream``.

    ``upstream`` is ``http://127.0.0.1:PORT`` (then ``url`` is the same URL pointing at the
    proxy) or ``127.0.0.1:PORT``. Use as a context manager; ``pid`` lets a caller leave the
    proxy out of its own accounting of child processes.
    """

    def __init__(self, upstream: str, latency_ms: float) -> None:
        parts = urlsplit(upstream if "//" in upstream else f"//{upstream}")
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"latency proxy upstream {upstream!r}: give host:port or a URL with a port")
        _require_loopback(parts.hostname, upstream)
        if latency_ms < 0:
            raise ValueError(f"latency proxy: latency {latency_ms} ms is negative")
        self._parts = parts
        self.upstream = (parts.hostname, parts.port)
        self.latency_ms = latency_ms
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None
        self._final_cpu: float | None = None

    @property
    def url(self) -> str:
        """The upstream URL with the proxy's address in place of the server's."""
        return urlunsplit(self._parts._replace(netloc=f"127.0.0.1:{self.port}"))

    @property
    def pid(self) -> int:
        assert self._proc is not None, "the latency proxy is not started"
        return self._proc.pid

    def start(self) -> LatencyProxy:
        cmd = [sys.executable, os.path.abspath(__file__), "--upstream", "{}:{}".format(*self.upstream)]
        cmd += ["--latency-ms", repr(self.latency_ms), "--exit-on-stdin-eof"]
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

    def cpu_seconds(self) -> float:
        """CPU (user + system) the proxy process has used so far, or in all once stopped."""
        if self._final_cpu is not None:
            return self._final_cpu
        return _cpu_of(self.pid)

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
    args = ap.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    _require_loopback(host, args.upstream)
    # Ctrl-C in a terminal reaches the whole process group: the parent stops the proxy.
    if args.exit_on_stdin_eof:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(serve((host, int(port)), args.latency_ms / 1000, args.port, args.exit_on_stdin_eof))


if __name__ == "__main__":
    main()
