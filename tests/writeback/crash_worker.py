"""A workspace writer run as a real subprocess so tests can SIGKILL it at a known point.

Usage: ``python -m tests.writeback.crash_worker '<json>'`` with ``overrides`` (Config),
``target_url``, ``mode`` ("write" or "flush"), ``files`` (count) and ``size`` (bytes each).
Prints ``ACK <path> <sha256>`` after each acknowledged close/fsync, then ``WRITING`` (mode
write: a file "fresh" is created and written but never fsynced, and "partial" keeps being
written without fsync until killed) or ``MIDFLUSH`` (mode flush: a flush is
under way and blocked inside an upload stream until killed). Never exits on its own.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import threading

from datahub.cache.writeback import open_workspace
from datahub.config import load_config
from datahub.storage import StoreRegistry


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


def main() -> None:
    spec = json.loads(sys.argv[1])
    config = load_config(env={}, overrides=spec["overrides"])
    ws = open_workspace("ws", config, StoreRegistry(config), target_url=spec["target_url"])
    rng = random.Random(spec.get("seed", 1))
    size = spec["size"]
    for i in range(spec["files"]):
        data = rng.randbytes(size)
        with ws.open(f"f{i}", create=True) as fh:
            for offset in range(0, size, 65536):  # many small writes, like a training loop
                fh.write(offset, data[offset : offset + 65536])
        ack(f"f{i}", data)
    if spec["mode"] == "write":
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
