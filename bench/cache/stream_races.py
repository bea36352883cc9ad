"""How often a sequential stream's reader fetches a page the stream also fetches, under
preemption: the body of tests/cache/test_stream.py's out-of-order reader, run N times with a
tiny switch interval (a thread preempted between any two bytecodes, as on a loaded machine).

Each run reads 24 pages in the kernel's slightly shuffled order through a real local store
that counts its requests; a run with more than one request had a race (a page fetched twice
and the stream's request cut in two). Prints the runs with an extra request and, for each,
the pages the reader fetched itself. Run beside a few busy loops for the CI machine's case:

    for i in 1 2 3 4; do timeout 300 sh -c 'while :; do :; done' & done
    python -m bench.cache.stream_races --runs 1000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path

from datahub.config import load_config
from datahub.storage import StoreRegistry
from tests.cache.conftest import put_objects
from tests.cache.test_stream import PAGE, idle, streaming_cache

ORDER = [0, 1, 3, 2, 4, 6, 5, 7, 9, 8, 10, 11, 13, 12, 14, 15, 17, 16, 18, 19, 21, 20, 22, 23]


def one_run(root: Path) -> tuple[int, list[int]]:
    """(requests, pages the reader fetched itself) of one out-of-order sequential read."""
    stores = StoreRegistry(load_config(env={}, overrides={"home": str(root / "var")}))
    (root / "origin").mkdir()
    source = stores.store((root / "origin").as_uri())
    [(ref, data)] = put_objects(source, [len(ORDER) * PAGE], seed=32)
    cache, store = streaming_cache(root, source, fill_after_random_reads=2)
    own: list[int] = []
    read = store.read

    def counted(key, start=0, end=None, etag=None):
        if threading.current_thread() is threading.main_thread():
            own.append(start // PAGE)
        return read(key, start, end, etag)

    store.read = counted
    try:
        with cache:
            got = {page: cache.read(ref, page * PAGE, PAGE) for page in ORDER}
            assert b"".join(got[p] for p in range(len(ORDER))) == data, "wrong bytes"
            idle(cache)
    finally:
        stores.close()
    return store.requests, own


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--switch-interval", type=float, default=1e-4)
    args = parser.parse_args(argv)
    sys.setswitchinterval(args.switch_interval)
    raced = 0
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="stream-races-") as d:
            requests, own = one_run(Path(d))
        if requests != 1:
            raced += 1
            print(f"run {i}: {requests} requests; the reader fetched pages {own} itself", flush=True)
    load = os.getloadavg()
    print(
        f"{raced} of {args.runs} runs with an extra request (load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
