"""A workspace writer run as a real subprocess so tests can SIGKILL it at a known point.

Usage: ``python -m tests.writeback.crash_worker '<json>'`` with ``overrides`` (Config),
``target_url``, ``mode`` ("write", "flush", "overlap", "staged" or "small"), ``files`` (count) and ``size``
(bytes each). Prints ``ACK <path> <sha256>`` after each acknowledged close/fsync, then
``WRITING`` (mode write: a file "fresh" is created and written but never fsynced, and
"partial" keeps being written without fsync until killed) or ``MIDFLUSH`` (mode flush: a
flush is under way and blocked inside an upload stream until killed). Never exits on its own.

Mode overlap stops a new file's first close between its two concurrent durable steps
(``block``): "put" (its record is journaled, its chunk write never starts), "torn" (half
the chunk is written under its final name, or into its range of a pack), "garbage" (a chunk of the right length but
wrong bytes, as a power cut can leave one), or "journal" (its chunk is stored, its journal
commit never happens). Meanwhile an acknowledged file "old" is being overwritten and is
stuck before its own commit. Markers: ``OLD-BLOCKED``, then ``JOURNALED`` (put, torn,
garbage) or ``STORED`` and ``JOURNAL-BLOCKED`` (journal).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import threading

from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
from datahub.writeback.journal import _Request


def ack(path: str, data: bytes | bytearray) -> None:
    print(f"ACK {path} {hashlib.sha256(data).hexdigest()}", flush=True)


class BlockMidUpload:
    """Progress sink that parks the flush after some bytes have streamed out."""

    def __init__(self, after_bytes: int) -> None:
        self.after, self.seen = after_bytes, 0

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        self.seen += nbytes
        if self.seen >= self.after:
            print("MIDFLUSH", flush=True)
            threading.Event().wait()  # until SIGKILL


def say(line: str) -> None:
    print(line, flush=True)


def forever() -> None:
    threading.Event().wait()  # until SIGKILL


def overlap(ws, rng: random.Random, block: str) -> None:
    """Old file rewritten and stuck before its commit; new file "v" stuck between its steps."""
    old = rng.randbytes(100_000)
    with ws.open("old", create=True) as fh:
        fh.write(0, old)
    ack("old", old)
    old_stuck = threading.Event()
    if block == "journal":
        apply, submit = ws.journal.apply, ws.journal.submit

        def blocked_apply(doing, fn):
            if doing == "fsync of 'old'":
                old_stuck.set()
                forever()
            return apply(doing, fn)

        def blocked_submit(doing, fn, covered=False):
            if doing == "fsync of 'v'":  # v's first commit: queued nowhere, never done
                say("JOURNAL-BLOCKED")
                return _Request(doing, fn, detached=True)
            return submit(doing, fn, covered)

        ws.journal.apply = blocked_apply
        ws.journal.submit = blocked_submit
        write = ws.chunks.write

        def stored_write(key, data, path, trailer=b""):
            write(key, data, path, trailer)
            if path == "v":
                say("STORED")

        ws.chunks.write = stored_write
    else:

        def blocked_put(*args, **kwargs):
            old_stuck.set()
            forever()

        ws.chunks.put = blocked_put  # sequential and write-behind uploads never finish

        def cut_write(key, data, path, trailer=b""):
            if block in ("torn", "garbage") and ws.chunks._root is not None:
                obj, start = ws.chunks.locate(key)  # a chunk file, or its range of a pack
                target = ws.chunks._root / obj
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "r+b" if target.exists() else "wb") as fh:
                    fh.seek(start)
                    fh.write(data[: len(data) // 2] if block == "torn" else bytes(len(data)))
            forever()

        ws.chunks.write = cut_write  # the chunk writes of v's first close
        submit = ws.journal.submit

        def journaled(doing, fn, covered=False):
            request = submit(doing, fn, covered)
            if doing == "fsync of 'v'":  # v's unverified first commit: say when it is durable

                def journaled_in_lmdb() -> None:
                    request.wait()
                    # a covered commit is deferred (journal.py): into LMDB now, as the crash
                    # state this test wants is a record on disk whose chunk is not
                    ws.journal.settle_deferred()
                    say("JOURNALED")

                threading.Thread(target=journaled_in_lmdb, daemon=True).start()
            return request

        ws.journal.submit = journaled

    def rewrite_old() -> None:
        with ws.open("old") as fh:
            fh.write(0, rng.randbytes(len(old)))

    threading.Thread(target=rewrite_old, daemon=True).start()
    old_stuck.wait()
    say("OLD-BLOCKED")
    with ws.open("v", create=True) as fh:
        fh.write(0, rng.randbytes(100_000))
    say("V-CLOSED")  # must never happen: its close is stuck
    forever()


def small_bytes(path: str, size: int) -> bytes:
    """The bytes of small file ``path`` in mode "small" (the test recomputes them)."""
    return random.Random(path).randbytes(size)


def small_mode(ws, size: int) -> None:
    """Mode "small": four writers create files of one chunk (covered first commits: their
    records go into the packs too) and close them, without pause, until killed; ``ACK``
    after each close, ``MANY`` once 40 are acknowledged."""
    out = threading.Lock()
    acked = [0]

    def writer(t: int) -> None:
        for n in range(1_000_000):
            path = f"s{t}-{n}"
            data = small_bytes(path, size)
            with ws.open(path, create=True) as fh:
                fh.write(0, data)
            with out:  # one whole line per write: the threads' lines never interleave
                sys.stdout.write(f"ACK {path} {hashlib.sha256(data).hexdigest()}\n")
                acked[0] += 1
                if acked[0] == 40:
                    sys.stdout.write("MANY\n")
                sys.stdout.flush()

    for t in range(4):
        threading.Thread(target=writer, args=(t,), daemon=True).start()
    forever()


def staged_write(fh, offset: int, data: bytes) -> None:
    """What the kernel does for a FUSE mount with passthrough writes: write the staged file."""
    os.pwrite(fh.staged_fd, data, offset)


def staged_mode(ws, rng: random.Random, size: int) -> None:
    """Mode "staged": files written into staged files (``Workspace.open(staged=True)``), then
    "partial" is fsynced and written on, in place, without another fsync until killed."""
    fh = ws.open("partial", create=True, truncate=True, staged=True)
    assert fh.staged_fd >= 0
    model = rng.randbytes(size)
    staged_write(fh, 0, model)
    fh.fsync()
    ack("partial", model)
    print("WRITING", flush=True)
    offset = 0
    while True:  # unacknowledged writes into the staged file (the acknowledged chunks must not change)
        staged_write(fh, offset % (2 * size), rng.randbytes(4096))
        offset += 4096


def main() -> None:
    spec = json.loads(sys.argv[1])
    config = load_config(env={}, overrides=spec["overrides"])
    ws = open_workspace("ws", config, StoreRegistry(config), target_url=spec["target_url"])
    rng = random.Random(spec.get("seed", 1))
    size = spec["size"]
    staged = spec["mode"] == "staged"
    for i in range(spec["files"]):
        data = rng.randbytes(size)
        with ws.open(f"f{i}", create=True, truncate=staged, staged=staged) as fh:
            for offset in range(0, size, 65536):  # many small writes, like a training loop
                if staged:
                    staged_write(fh, offset, data[offset : offset + 65536])
                else:
                    fh.write(offset, data[offset : offset + 65536])
        ack(f"f{i}", data)
    if spec["mode"] == "staged":
        staged_mode(ws, rng, size)
    elif spec["mode"] == "small":
        small_mode(ws, size)
    elif spec["mode"] == "overlap":
        overlap(ws, rng, spec["block"])
    elif spec["mode"] == "write":
        fh = ws.open("partial", create=True)
        model = bytearray(rng.randbytes(size))
        fh.write(0, model)
        fh.fsync()
        ack("partial", model)
        fresh = ws.open("fresh", create=True)  # created, never fsynced: may vanish, never half-written
        fresh.write(0, rng.randbytes(size))  # its full chunks upload now (write-behind)
        fresh._of._wait_uploads()
        print("WRITING", flush=True)
        offset = 0
        while True:  # unacknowledged writes until killed
            piece = rng.randbytes(4096)
            fh.write(offset % (2 * size), piece)
            offset += 4096
    else:
        ws.flush(progress=BlockMidUpload(spec["block_after"]))


if __name__ == "__main__":
    main()
