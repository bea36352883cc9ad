"""A `datahub serve` worker's error line escapes control characters (fsdirs18's finding): the
message may quote a user's string (a path, a dataset name), and an escape sequence in it must
not reach the terminal of whoever runs the server."""

from __future__ import annotations

import os
import socket

from datahub.api.workers import _fork_worker
from datahub.errors import InvalidInput


def _fails(_sock: socket.socket) -> int:
    raise InvalidInput("catalog path '/tmp/\x1b[2Jevil' is not a directory")


def test_a_workers_error_line_writes_control_characters_out(capfd) -> None:
    a, b = socket.socketpair()
    try:
        pid = _fork_worker(a, _fails)
        _, status = os.waitpid(pid, 0)
    finally:
        a.close()
        b.close()
    err = capfd.readouterr().err
    assert os.waitstatus_to_exitcode(status) == 1
    assert "\\x1b[2Jevil" in err and "\x1b" not in err, err
