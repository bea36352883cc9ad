"""Local mode's callers: the programs of this machine, never a web page (promise 5).

Local mode has no credentials: every caller is the global admin ``local``, and the loopback
bind (``server.check_bind``) is what keeps other machines out. It does not keep out the web
pages of the user's own browser, which reach 127.0.0.1 too: any site may send a cross-site
``POST`` of ``text/plain`` without a preflight (the commit routes read a body of any type),
and a site whose DNS name is re-pointed at 127.0.0.1 (DNS rebinding) reads every answer as
its own. A browser always names the site it talks to in ``Host`` and, on such requests, the
page in ``Origin``; so in local mode both must name this machine (``localhost``, 127.0.0.0/8,
::1; any port). Programs (the CLI, nodes, curl) send a loopback ``Host`` and no ``Origin``.
With ``--auth`` the bearer token is the credential, which no other site can make a browser
send, so nothing is checked here. ``/healthz`` answers everyone as before: it says only that the
process serves, and a liveness probe may name any host.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from datahub.api.errors import error_response
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
    return None


class LocalCallersOnly:
    """ASGI middleware: in local mode, refuse (403 ``access_denied``) what a web page sent."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app, self.config = app, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.config.api.local_mode and scope["path"] != "/healthz":
            why = refusal(dict(scope.get("headers") or []))
            if why is not None:
                response = error_response(
                    403,
                    "access_denied",
                    f"this server runs in local mode (no authentication), which answers only programs "
                    f"on this machine, and {why}: open it as http://127.0.0.1:{self.config.api.port}/ "
                    "(or localhost), or serve it with --auth and tokens (datahub token create)",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
