"""How the soak names what a client got back: a clean error has a kind, wrong bytes are never clean.

A clean error is what the issue allows a reader to see during faults: an errno from a mount
(EIO, ENOTCONN, ESTALE, ENOSPC ...), a datahub error with its code, an HTTP 4xx/5xx with a
body, or a connection that failed. Anything else (an exception the client did not expect)
is reported as ``unexpected:<type>`` and fails the check.
"""

from __future__ import annotations

import errno as _errno

CLEAN_PREFIXES = ("errno:", "datahub:", "http:", "conn:")


def classify(exc: BaseException) -> str:
    """The kind of a failure, e.g. ``errno:EIO``, ``datahub:storage_unavailable``."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and type(exc).__module__.startswith("datahub"):
        return f"datahub:{code}"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"errno:{_errno.errorcode.get(exc.errno, str(exc.errno))}"
    name = type(exc).__name__
    if name in (
        "ConnectError",
        "ReadTimeout",
        "ConnectTimeout",
        "RemoteProtocolError",
        "ReadError",
        "WriteError",
    ):
        return f"conn:{name}"
    return f"unexpected:{name}:{str(exc)[:200]}"


def is_clean(kind: str) -> bool:
    return kind.startswith(CLEAN_PREFIXES)
