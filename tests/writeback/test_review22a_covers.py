"""review22a: covered first closes on S3/RGW (ceph41) when one path has several histories.

A new small file's first close on an S3/RGW shared tier is acknowledged by one PUT whose
user metadata carries its cover record; its journal change is deferred. Every other write
transaction (an unlink, a rename, an overwrite's commit) writes the deferred ones first, and
recovery after a crash replays only the records above the journal's ``covered``. So after a
kill -9, a path that was created, unlinked, renamed away or overwritten and then created
again must come back as its newest acknowledged content: never an older record's bytes,
never a file unlinked before the kill (whose chunk object, record and all, is still in the
bucket: the collector had not run). Here a real process does that history on moto, its last
creates still deferred, and is killed -9.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.errors import NotFound
from tests.writeback.conftest import CHUNK, Env, make_env

REPO = Path(__file__).resolve().parents[2]

#: the writer: every close below is acknowledged when it returns; the last five are covered
#: first closes still deferred (out of LMDB) at the kill. Prints the deferred count, then waits.
WRITER = r"""
import json, sys, threading
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace

args = json.loads(sys.argv[1])
config = load_config(env={}, overrides=args["overrides"])
ws = open_workspace("ws", config, StoreRegistry(config))
ws.journal.defer_seconds = 3600.0  # covered commits stay deferred unless a transaction writes them

def write(path, data):
    with ws.open(path, create=True, truncate=True) as fh:
        fh.write(0, data.encode())

write("a", "a, first")       # covered, deferred
ws.unlink("a")                # written into LMDB with the deferred one before it
write("b", "b, first")
ws.rename("b", "c")           # b's record now names c's file
write("d", "d, first")
write("d", "d, second")       # the same file's second commit: synced
write("e", "e, unlinked")
ws.unlink("e")                # its chunk and record stay in the bucket (no collection)
write("g", "g, first")
ws.rename("g", "h")
write("f", "f, a file first")
ws.unlink("f")
ws.mkdir("f")                 # the path is a directory now
covered = ws.journal.deferred()
write("a", "a, second")       # covered first closes of new files at old paths: deferred
write("b", "b, second")
write("g", "g, second")
write("f/inner", "inside the directory f")
write("new", "a new path")
print("DEFERRED", covered, ws.journal.deferred(), flush=True)
threading.Event().wait()      # until SIGKILL
"""

EXPECTED = {
    "a": b"a, second",
    "b": b"b, second",
    "c": b"b, first",
    "d": b"d, second",
    "h": b"g, first",
    "g": b"g, second",
    "f/inner": b"inside the directory f",
    "new": b"a new path",
}


@pytest.fixture
def s3_env(tmp_path: Path, moto_endpoint) -> Iterator[Env]:
    """Moto only: RGW runs the same code path (``test_ceph41_rgw_cover.py``), and each run here
    is a process of its own (the suite's time)."""
    env = make_env(tmp_path, moto_endpoint, shared_s3=True)
    yield env
    env.close()


def _overrides(env: Env) -> dict:
    """``make_env``'s overrides, for a process of its own."""
    cache = {"page_size": CHUNK, "flush_interval": 3600, "shared_url": env.config.cache.shared_url}
    s3 = {k: v for k, v in vars(env.config.s3).items() if v is not None}
    return {"home": env.config.home, "cache": cache, "s3": s3}


def _run_and_kill(env: Env) -> tuple[int, int]:
    """Run ``WRITER`` to its end and SIGKILL it; (deferred before its last five closes, after)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, json.dumps({"overrides": _overrides(env)})],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("DEFERRED"), proc.stderr.read()[-3000:]  # type: ignore[union-attr]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL
    _, before, after = line.split()
    return int(before), int(after)


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 20)


def test_a_kill_brings_back_each_path_as_its_newest_acknowledged_close(s3_env: Env) -> None:
    before, after = _run_and_kill(s3_env)
    assert (before, after) == (0, 5)  # the synced steps wrote the earlier ones; the last five were lost
    ws = s3_env.open()
    got = {path: _read(ws, path) for path in EXPECTED}
    assert got == EXPECTED
    for gone in ("e",):  # unlinked before the kill: its record is in the bucket, below ``covered``
        with pytest.raises(NotFound):
            ws.stat(gone)
    assert sorted(name for name, _ in ws.listdir("")) == ["a", "b", "c", "d", "f", "g", "h", "new"]
    assert ws.stat("f").is_dir
    with ws.journal.read() as txn:
        assert not [rec for _, rec in txn.files() if rec.get("unverified")]
    ws.close()
