"""What a big file's close waits for: the last write-behind chunk, then the journal commit.

    .venv/bin/python bench/writeback/close_tail.py [--files 24] [--size 16777216] [--home DIR]

Issue 41 (bigwrites20). Through the ``Workspace`` API in this process (local shared tier,
no mount, flush interval an hour): each file is created, written in 1 MiB calls and closed;
printed per file: the time of the writes, of the close, and of the close's wait for the
write-behind uploads still running (``OpenFile._wait_uploads``, timed by wrapping it); the
rest of the close is the journal commit. The tree is the one the script lies in (run a base
tree's copy for an A/B).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import files, open_workspace

MiB = 1024**2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=24)
    ap.add_argument("--size", type=int, default=16 * MiB)
    ap.add_argument("--home", default=None, help="where to work (default: a temp dir under /tmp)")
    args = ap.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="wb-close-tail-"))
    config = load_config(env={}, overrides={"home": str(home), "cache": {"flush_interval": 3600}})
    waited = [0.0]
    wait = files.OpenFile._wait_uploads

    def timed_wait(self: files.OpenFile) -> None:
        start = time.perf_counter()
        wait(self)
        waited[0] += time.perf_counter() - start

    files.OpenFile._wait_uploads = timed_wait  # type: ignore[method-assign]
    ws = open_workspace("tail", config, StoreRegistry(config))
    data = os.urandom(args.size)
    writes = closes = 0.0
    try:
        for i in range(args.files):
            start = time.perf_counter()
            fh = ws.open(f"f{i:04d}", create=True, truncate=True)
            for off in range(0, len(data), MiB):
                fh.write(off, data[off : off + MiB])
            wrote = time.perf_counter()
            fh.close()
            writes += wrote - start
            closes += time.perf_counter() - wrote
    finally:
        ws.close()
        shutil.rmtree(home, ignore_errors=True)
    n = args.files
    print(f"{n} x {args.size:,} B from {Path(files.__file__).parents[2]}: per file writes {1000 * writes / n:.1f} ms, "
          f"close {1000 * closes / n:.1f} ms, of which waiting for write-behind uploads "
          f"{1000 * waited[0] / n:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
