"""Running the API: bind checks, and a uvicorn server in a thread that stops cleanly.

Shared by ``datahub serve`` and the ``make run`` demo. The listening socket is bound here,
so a busy port is one clear error (not a uvicorn traceback), and local mode (no
authentication) is refused on anything but a loopback address (promise 5).
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn
from fastapi import FastAPI

from datahub.api.local_mode import is_loopback
from datahub.config import Config
from datahub.errors import Conflict, DatahubError, InvalidInput

API_CREDENTIALS = "create tokens with `datahub token create --principal NAME`"  # as typed (as_typed)


def check_bind(config: Config, credentials: str = API_CREDENTIALS) -> None:
    """Local mode serves everyone as admin, so it must never listen beyond this machine.
    ``credentials``: what gives callers an identity once authentication is on."""
    if config.api.local_mode and not is_loopback(config.api.host):
        raise InvalidInput(
            f"refusing local mode (no authentication) on {config.api.host}: bind 127.0.0.1, or turn "
            f"authentication on (--auth / api.local_mode = false) and {credentials}",
            host=config.api.host,
        )


def _listen_advice(exc: OSError, host: str, port: int, other_port: str) -> str:
    """What to do about a bind that failed for another reason than a taken port: the bare
    strerror ("Cannot assign requested address") left a new user guessing (newuser44)."""
    if isinstance(exc, socket.gaierror):
        return (
            f"{host!r} is not a host name this machine resolves: give an address such as 127.0.0.1 or 0.0.0.0"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{host} is not an address of this machine: use 127.0.0.1 (this machine only), 0.0.0.0 "
            "(every interface) or one that `ip -brief addr` lists"
        )
    if exc.errno == errno.EACCES:
        return (
            f"ports below 1024 need root or CAP_NET_BIND_SERVICE: choose a port from 1024 up ({other_port})"
        )
    return f"check the host and port ({other_port})"


def bind_socket(
    host: str, port: int, *, reuse_port: bool = False, listen: bool = True, other_port: str = "--port"
) -> socket.socket:
    """A bound TCP socket; ``reuse_port`` lets several worker processes each bind their own
    listening socket to the port, and the kernel spreads connections evenly among them.
    ``other_port``: how the caller's user picks another port, named when this one is taken."""
    if not 0 <= port <= 65535:  # else Python's OverflowError reached the user as "a datahub bug"
        raise InvalidInput(f"port {port} is not a TCP port: use 1-65535 ({other_port})", host=host, port=port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are TCP;
    # without it every response waits ~40 ms (Nagle meets delayed ACK; measured 43 ms per /healthz).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise Conflict(
                f"port {port} on {host} is already in use: stop the other server or choose another port "
                f"({other_port})",
                host=host,
                port=port,
            ) from exc
        raise InvalidInput(
            f"cannot listen on {host}:{port}: {exc.strerror}: {_listen_advice(exc, host, port, other_port)}",
            host=host,
            port=port,
        ) from exc
    if listen:
        sock.listen(1024)
    sock.set_inheritable(True)
    return sock


class ApiServer:
    """uvicorn in a background thread; ``start`` returns once requests are answered."""

    def __init__(
        self,
        app: FastAPI,
        config: Config,
        *,
        sock: socket.socket | None = None,
    ) -> None:
        """``sock``: a socket already bound by ``bind_socket`` (e.g. reserved before slow setup)."""
        check_bind(config)
        self.host, self.port = config.api.host, config.api.port
        if sock is not None:
            self.host = sock.getsockname()[0]
        self._socket = sock if sock is not None else bind_socket(self.host, self.port)
        self.port = self._socket.getsockname()[1]  # port 0 picks a free one
        # local mode checks whose socket the client is (local_mode.foreign_user): the client's
        # address must be the socket's, never one an X-Forwarded-For header of a loopback caller
        # names (uvicorn trusts those from 127.0.0.1 by default)
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="on",
                access_log=False,
                timeout_graceful_shutdown=5,
                proxy_headers=not config.api.local_mode,
                # no route is a WebSocket: "auto" imported wsproto (or websockets) in every
                # server start for nothing (suiteC26); an upgrade request is answered as HTTP
                ws="none",
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="datahub-api", daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise DatahubError(f"the API server on {self.url} failed to start; see the log above")
            if time.monotonic() > deadline:
                raise DatahubError(f"the API server on {self.url} did not start within {timeout:.0f}s")
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def stop_signals(signals: tuple[int, ...] | None = None) -> Iterator[Callable[[], int]]:
    """Catch SIGINT and SIGTERM from here on; yields ``wait``, which blocks the main thread until
    one came and returns its number. The previous handlers come back on exit.

    Why a context entered before the server starts: ``/healthz`` answers as soon as
    ``start()`` runs, so a supervisor (or a test) may send SIGTERM before the caller reaches
    its wait; with the handlers installed only then, that signal killed the process (exit
    -15) with its cache never closed."""
    import signal

    signals = signals or (signal.SIGINT, signal.SIGTERM)
    received = threading.Event()
    got: list[int] = []

    def handler(signum: int, frame: object) -> None:
        got.append(signum)
        received.set()

    def wait() -> int:
        while not received.wait(0.5):
            pass
        return got[0]

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield wait
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
