"""What ``datahub serve`` prints as its address: one a person can open.

A wildcard bind printed ``http://0.0.0.0:8081/``, which no browser opens (newuser11's
finding); the machine's name stands for it now.
"""

from __future__ import annotations

import socket

from datahub.cli.serve_cmd import _url


def test_a_wildcard_bind_prints_the_machines_name() -> None:
    name = socket.gethostname()
    assert _url("0.0.0.0", 8081) == f"http://{name}:8081"
    assert _url("::", 8081) == (f"http://[{name}]:8081" if ":" in name else f"http://{name}:8081")
    assert _url("127.0.0.1", 8081) == "http://127.0.0.1:8081"
    assert _url("::1", 8081) == "http://[::1]:8081"
