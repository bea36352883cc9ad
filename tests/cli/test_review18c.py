"""review18c: leftovers18's terminal escaping against C1 controls.

``shown`` wrote out C0 controls (``\\x00``-``\\x1f``, DEL) only. The C1 controls (U+0080-U+009F)
are controls too: xterm and others act on CSI (U+009B) and OSC (U+009D) as on ``ESC [`` and
``ESC ]``, UTF-8 encoded or not, so a lease holder (any node writes one) or a key (the key rule
refuses C0 only) still cleared or retitled an operator's terminal."""

from __future__ import annotations

import json
import os

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


SCRIPT = r"""
import sqlite3, sys
from pathlib import Path
from datahub.catalog import open_catalog
from datahub.cli.main import main
from datahub.writeback.lease import WriterLease

home, holder = Path(sys.argv[1]), sys.argv[2]
assert main(["--home", str(home), "init"]) == 0  # the CLI's logging, as `datahub mount` has it
catalog = open_catalog(f"sqlite:///{home / 'catalog.db'}")
(home / "j").mkdir()
lease = WriterLease(catalog.store, "ws", "workspace 'ws'", home / "j", ttl=60)
with sqlite3.connect(home / "catalog.db.leases") as conn:  # another node took it over meanwhile
    conn.execute("UPDATE leases SET owner = 'b', holder = ?, epoch = 2, expires = 4e9", (holder,))
assert lease.renew() is False  # refused: logged, naming the new holder
"""


def test_a_log_line_quoting_a_holder_reaches_the_terminal_escaped(tmp_path) -> None:
    """A mount in the foreground logs to the terminal; a renewal refused quotes the node that
    holds the lease now (its holder string, written by that node): logging printed it raw."""
    import subprocess
    import sys

    holder = "host b pid 2\x1b[2J\u009b2J\x07"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "var"), holder],
        capture_output=True,
        text=True,
        env={**os.environ, "DATAHUB_LOG": "", "DATAHUB_CONFIG": ""},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "is no longer ours" in done.stderr, done.stderr
    assert not any(ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in done.stderr), done.stderr
    assert "host b pid 2\\x1b[2J\\x9b2J\\x07" in done.stderr


def test_a_prefetch_failure_line_quoting_a_records_url_cannot_forge_lines(dh, tmp_path) -> None:  # noqa: F811
    """``prefetch`` (and ``cache pin``) writes one line per failed object, quoting its URL, which the record's
    writer chose: a newline in it forged a line of the report (a success, say)."""
    from datahub.catalog import Put, Record, open_catalog

    assert dh("init")[0] == 0
    url = (tmp_path / "nowhere").as_uri() + "\nprefetch ds@v1: 1 objects, all cached"
    catalog = open_catalog(f"sqlite:///{tmp_path / 'var' / 'catalog.db'}")
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", [Put(Record("k", url, "e", 3))])
    finally:
        catalog.close()
    code, out, err = dh("prefetch", "ds@1")
    assert code == 1, (out, err)
    assert not any(line.startswith("prefetch ds@v1: 1 objects, all cached") for line in out.splitlines()), out
    assert "\\x0aprefetch ds@v1" in out, out
