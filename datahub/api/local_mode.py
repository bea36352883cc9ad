"""Local mode's callers: the programs of this machine, never a web page (promise 5).

Local mode has no credentials: every caller is the global admin ``local``, and the loopback
bind (``server.check_bind``) is what keeps other machines out. It does not keep out the web
pages of the user's own browser, which reach 127.0.0.1 too: any site may send a cross-site
``POST`` of ``text/plain`` without a preflight (the commit routes read a body of any type),
and a site whose DNS name is re-pointed at 127.0.0.1 (DNS rebinding) reads every answer as
its own. A browser always names the site it talks to in ``Host`` and, on such requests, the
page in ``Origin``; so in local mode both must name this machine (``localhost``, 127.0.0.0/8,
::1; any port in ``Host``), and ``Origin`` must be the server's own origin (the one ``Host``
names): a page served by another program of this machine on another port (a notebook server
rendering a downloaded HTML file, ``python -m http.server``, a dev server) is a web page too,
and was the global admin here (a ``text/plain`` POST from it committed; caller34). No page of
another origin can use this API anyway: it answers no CORS preflight, so such a page can send
only blind "simple" requests, which are the attack. Programs (the CLI, nodes, curl) send a
loopback ``Host`` and no ``Origin``.
With ``--auth`` the bearer token is the credential, which no other site can make a browser
send, so nothing is checked here. ``/healthz`` answers everyone as before: it says only that the
process serves, and a liveness probe may name any host.

Nor does a loopback bind keep out the other users of this machine (a shared workstation, a
GPU box): every local account reaches 127.0.0.1 too, and was the global admin there, though the
catalog file and the cache are the server's user's alone (0600). So a connection is answered
only when its other end, the client's socket, belongs to the server's own user (or root, who
reads that user's files anyway): ``peer_uid`` asks the kernel's socket table (sock_diag, as
``ss`` does) for that socket by its addresses and ports, and reads its owner. A socket no
process holds any more (its sender closed it after sending: an orphan, listed with no owner)
is refused too, as is one that cannot be found. This is Linux's table; datahub serves on
Linux only (FUSE).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from datahub.api.errors import as_run, error_response, served_cli
from datahub.api.tokens import TOKEN_COMMAND
from datahub.config import Config

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """A host name or address (no port, IPv6 without brackets) that only reaches this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(authority: str) -> str:
    """``host[:port]`` or ``[v6]:port`` -> the host; "" when it does not parse."""
    try:
        return urlsplit(f"//{authority}").hostname or ""
    except ValueError:
        return ""


def refusal(headers: dict[bytes, bytes]) -> str | None:
    """Why a local-mode server must not answer a request with these headers, or None."""
    host = headers.get(b"host", b"").decode("latin-1")
    if host and not is_loopback(_host_of(host)):
        return f"it was addressed to {host[:200]!r}, a site name that is not this machine's"
    origin = headers.get(b"origin")
    if origin is not None:
        text = origin.decode("latin-1")
        if urlsplit(text).scheme not in ("http", "https") or not is_loopback(_host_of(urlsplit(text).netloc)):
            return f"it was sent by a web page of {text[:200]!r}"
        if host and urlsplit(text).netloc.lower() != host.lower():
            # a page of another program of this machine (another port): see the module docstring
            return f"it was sent by a web page of {text[:200]!r}, another origin than this server's"
    return None


# sock_diag (linux/sock_diag.h, linux/inet_diag.h): the kernel's socket table, as ``ss`` reads it
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST = 4, 20, 1
_NO_COOKIE = 0xFFFFFFFF
_ID_AT = 16 + 4  # nlmsghdr, then inet_diag_msg: family, state, timer, retrans, then its sockid
_UID_AT = _ID_AT + 48 + 12  # past the sockid and expires, rqueue, wqueue


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The user owning the client's end of this host's TCP connection ``client`` -> ``server``;
    None when no process holds it (an orphan or a closed socket, listed with inode 0) or it is
    not found. One exact lookup by the four-tuple (a few µs in the kernel): reading
    ``/proc/net/tcp`` instead cost ms per request on a host with thousands of sockets."""
    ip, peer = ipaddress.ip_address(client[0]), ipaddress.ip_address(server[0])
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    sockid = (
        struct.pack("!HH", client[1], server[1])
        + ip.packed.ljust(16, b"\0")
        + peer.packed.ljust(16, b"\0")
        + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    )
    request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) + sockid
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(5)
            diag.sendto(header + request, (0, 0))
            answer = diag.recv(65536)
    except OSError:
        return None
    # an NLMSG_ERROR (no such socket) is no inet_diag_msg; with no connected socket of that
    # four-tuple the kernel answers a listening one of the client's address and port, which
    # is not the client's socket
    if len(answer) < _UID_AT + 8 or struct.unpack_from("=H", answer, 4)[0] != _SOCK_DIAG_BY_FAMILY:
        return None
    if answer[_ID_AT : _ID_AT + 36] != sockid[:36]:
        return None
    uid, inode = struct.unpack_from("=II", answer, _UID_AT)
    return uid if inode else None


def foreign_user(scope: Scope) -> str | None:
    """Why the client of ``scope`` may not be answered as this server's user, or None.

    A client that is no IP address (an in-process test client) has no socket to check."""
    client, server = scope.get("client"), scope.get("server")
    if not client or not server:
        return None
    try:
        ipaddress.ip_address(client[0])
    except ValueError:
        return None
    uid = peer_uid((client[0], int(client[1])), (server[0], int(server[1])))
    if uid is None:
        return "no process of this machine holds the connection it came on any more"
    if uid not in (os.geteuid(), 0):
        return f"it came from another user of this machine (uid {uid})"
    return None


class LocalCallersOnly:
    """ASGI middleware: in local mode, refuse (403 ``access_denied``) what a web page or
    another user of this machine sent."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app, self.config = app, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.config.api.local_mode and scope["path"] != "/healthz":
            why = refusal(dict(scope.get("headers") or []))
            hint = f"open it as http://127.0.0.1:{self.config.api.port}/ (or localhost), or serve it"
            if why is None and (why := foreign_user(scope)) is not None:
                hint = "its user may serve it"
            if why is not None:
                response = error_response(
                    403,
                    "access_denied",
                    as_run(
                        f"this server runs in local mode (no authentication), which answers only the "
                        f"programs of its own user on this machine, and {why}: {hint} with --auth and "
                        f"tokens ({TOKEN_COMMAND})",
                        served_cli(scope.get("app")),
                    ),
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
