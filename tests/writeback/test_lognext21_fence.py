"""lognext21, 4: a holder whose lease is broken ``--at-once`` while it still runs.

``datahub lease break W --at-once`` frees the lease now; the holder learns it at its next
renewal, and one that cannot reach the catalog (a stalled link) acknowledges on until ``ttl -
ttl/6`` after its last renewal began (``lease.py``). Node a here is a real process writing and
closing files in a loop, printing each one once its close returned; its catalog link fails
from the break on. Node b breaks the lease at once, takes it, and adopts a's journal at once:
before the fix the adoption read the log while a still acknowledged files, and those files
were nowhere (a is killed -9 after: lost). Now ``await_fenced`` waits until a's fence must have
stopped it (``ttl`` after the break, on the catalog's clock), and every file a acknowledged is
adopted, byte for byte. A ttl of 6 s keeps the test short; nodes use 30 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.writeback import open_workspace
from datahub.writeback.adopt import adopt_journal, await_fenced
from tests.writeback.test_lognext21 import WS, Pair
from tests.writeback.test_nodeloss20 import _files

REPO = Path(__file__).resolve().parents[2]
TTL = 6.0

#: node a: its catalog link stalls once the lease is taken from it (each renewal fails as an
#: unreachable catalog does, never refused), so only its own clock fences it
NODE_A = r"""
import json, sys, threading
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config
from datahub.errors import Conflict
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace

args = json.loads(sys.argv[1])

class Stalled(SQLiteCatalogStore):
    def renew_lease(self, name, owner, epoch, ttl):
        try:
            return super().renew_lease(name, owner, epoch, ttl)
        except Conflict:
            raise TimeoutError("test: the catalog is unreachable from node a") from None

config = load_config(env={}, overrides=args["overrides"])
ws = open_workspace("shared", config, StoreRegistry(config), lease=Stalled(args["catalog"]),
                    lease_ttl=args["ttl"])
print("JOURNAL", ws.chunks.journal, flush=True)
i = 0
while True:
    path = f"f{i:05d}"
    try:
        with ws.open(path, create=True, truncate=True) as fh:
            fh.write(0, f"node a's file {i}".encode())
    except Exception as exc:
        print("FENCED", type(exc).__name__, flush=True)
        threading.Event().wait()
    print("ACK", path, flush=True)
    i += 1
    threading.Event().wait(0.02)  # a workload's pace: a few hundred files, not thousands
"""


class _Lines:
    """Node a's stdout, read on a thread; ``wait(pred)`` until a line matches."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()
        with self._cond:
            self.lines.append("EOF")
            self._cond.notify_all()

    def wait(self, pred, timeout: float = 60.0) -> str:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(pred(x) or x == "EOF" for x in self.lines), timeout)
            found = next((x for x in self.lines if pred(x) or x == "EOF"), "")
        assert ok and found != "EOF", f"node a: {self.lines[-5:]}"
        return found

    def count(self, prefix: str) -> int:
        with self._cond:
            return sum(x.startswith(prefix) for x in self.lines)


@contextmanager
def node_a_acknowledging(
    tmp_path: Path,
) -> Iterator[tuple[Pair, SQLiteCatalogStore, subprocess.Popen, _Lines, str]]:
    """Node a as a real process holding the lease (``TTL``) and closing a file every ~20 ms, its
    first two acknowledged: (pair, leases on the real clock, the process, its lines, its
    journal id). Killed, and everything closed, after."""
    pair = Pair(tmp_path)
    leases = SQLiteCatalogStore(pair.catalog_path)  # the real clock: node a's is
    args = {"overrides": pair.overrides["a"], "catalog": str(pair.catalog_path), "ttl": TTL}
    proc = subprocess.Popen(
        [sys.executable, "-c", NODE_A, json.dumps(args)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        out = _Lines(proc)
        journal = out.wait(lambda x: x.startswith("JOURNAL")).split()[1]
        out.wait(lambda x: x == "ACK f00002")
        yield pair, leases, proc, out, journal
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        leases.close()
        pair.close()


def adopted_every_ack(out: _Lines, b) -> tuple[list[str], dict[str, bytes]]:
    """Every file node a acknowledged is in workspace ``b`` (a killed: they are b's alone);
    (the acknowledged paths, b's files)."""
    acked = [x.split()[1] for x in out.lines if x.startswith("ACK ")]
    files = _files(b)
    missing = [p for p in acked if p not in files]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged files not adopted: {missing[:5]}"
    return acked, files


def test_a_holder_broken_at_once_acknowledges_nothing_the_adoption_misses(tmp_path: Path) -> None:
    with node_a_acknowledging(tmp_path) as (pair, leases, proc, out, journal):
        assert leases.break_lease(WS, at_once=True) is not None  # `datahub lease break --at-once`
        before = leases.lease(WS)
        b = open_workspace(WS, pair.config["b"], pair.stores["b"], lease=leases, lease_ttl=TTL)
        try:
            # a acknowledges still, though b holds the lease: the window (unless a load slowed
            # b's open past a's fence, 3-5 s after the break: then there is nothing to miss)
            acked_at_take = out.count("ACK ")
            out.wait(
                lambda x: (
                    x.startswith("FENCED") or (x.startswith("ACK ") and out.count("ACK ") > acked_at_take)
                )
            )
            assert await_fenced(b, leases, before, ttl=TTL) > 0
            adopt_journal(b, journal, pair.stores["b"])
            out.wait(lambda x: x.startswith("FENCED"))  # a stopped on its own clock
            os.kill(proc.pid, signal.SIGKILL)  # ... and dies: what it acknowledged is b's alone
            proc.wait()
            acked, files = adopted_every_ack(out, b)
            for path in acked:
                assert files[path] == f"node a's file {int(path[1:])}".encode()
        finally:
            b.close()
