"""review18c: leftovers18's terminal escaping against C1 controls.

``shown`` wrote out C0 controls (``\\x00``-``\\x1f``, DEL) only. The C1 controls (U+0080-U+009F)
are controls too: xterm and others act on CSI (U+009B) and OSC (U+009D) as on ``ESC [`` and
``ESC ]``, UTF-8 encoded or not, so a lease holder (any node writes one) or a key (the key rule
refuses C0 only) still cleared or retitled an operator's terminal."""

from __future__ import annotations

import json

from tests.cli.test_cli import dh  # noqa: F401 - the fixture
from tests.cli.test_leftovers18 import _raw_lease

HOLDER = "host a pid 1\u009b2J\u009d0;owned\u009c"


def test_c1_controls_in_a_holder_reach_the_terminal_escaped(dh, tmp_path) -> None:  # noqa: F811
    assert dh("init")[0] == 0
    _raw_lease(tmp_path, "ws", HOLDER, 4e9)
    for argv in (("lease", "list"), ("lease", "show", "ws"), ("lease", "break", "ws")):
        code, out, err = dh(*argv)
        assert code == 0 and not any(0x80 <= ord(c) <= 0x9F for c in out + err), (argv, out)
        assert "\\x9b2J" in out, (argv, out)
    assert json.loads(dh("lease", "show", "ws", json_output=True)[1])["holder"] == HOLDER  # exact
