"""What a self-verifying blob read costs (blobs17, ``datahub.cache.selfverify``).

Why: every origin read of the cache now goes through ``selfverify.read`` so that a record of a
content-addressed blob replaced by its own bytes still reads. On the normal path (the etag
matches) it must cost nothing: no request, and CPU within noise of the plain ``store.read``.
This measures, in ONE process on a local ``file://`` store (no network: low noise):

* client CPU per 4 KiB ranged read under If-Match: ``store.read`` (before) and
  ``selfverify.read`` (after), in alternating batches within each round;
* the one-time cost where it applies: CPU seconds per MiB of the whole-object verify of a
  ``--blob-mib`` blob read under an etag it no longer has (stat, read, sha256), and the CPU
  of the later page reads under the remembered etag.

The machine is shared: CPU (``time.process_time``) is the figure; the load average is printed.

Usage: PYTHONPATH=. .venv/bin/python bench/cache/selfverify_cost.py [--reads 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cache.common import load_average  # noqa: E402
from datahub.cache import selfverify  # noqa: E402
from datahub.config import load_config  # noqa: E402
from datahub.ingest.blobs import blob_key  # noqa: E402
from datahub.storage import StoreRegistry  # noqa: E402

PAGE = 4096


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reads", type=int, default=20000, help="ranged reads per side per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blob-mib", type=int, default=64)
    ap.add_argument("--scratch", default="/var/tmp")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        config = load_config(env={}, overrides={"home": f"{tmp}/var"})
        with StoreRegistry(config) as stores:
            store = stores.store(Path(tmp, "objects").as_uri())
            data = os.urandom(1 << 20)
            key = blob_key(hashlib.sha256(data).hexdigest())
            info = store.put(key, data)
            url = store.url_for(key)
            print(f"{load_average()}; {args.reads} reads of {PAGE} B per side per round")
            plain, verified = [], []
            for r in range(args.rounds):
                sides = [("plain", plain), ("selfverify", verified)]
                for name, out in sides if r % 2 == 0 else sides[::-1]:
                    cpu = time.process_time()
                    for i in range(args.reads):
                        start = (i * PAGE) % len(data)
                        if name == "plain":
                            store.read(key, start, start + PAGE, etag=info.etag)
                        else:
                            selfverify.read(store, key, url, info.etag, start, start + PAGE)
                    out.append(1e6 * (time.process_time() - cpu) / args.reads)
                print(
                    f"  round {r + 1}: plain {plain[-1]:.2f} us/read, selfverify {verified[-1]:.2f} us/read"
                )
            print(
                f"median CPU per read: plain {statistics.median(plain):.2f} us, "
                f"selfverify {statistics.median(verified):.2f} us (etag matches; {load_average()})"
            )
            big = os.urandom(args.blob_mib << 20)
            key = blob_key(hashlib.sha256(big).hexdigest())
            store.put(key, big)
            url = store.url_for(key)
            stale = '"an etag the blob had once"'
            cpu = time.process_time()
            selfverify.read(store, key, url, stale, 0, PAGE)  # refused, verified whole, read
            once = time.process_time() - cpu
            cpu = time.process_time()
            for i in range(args.reads):
                start = (i * PAGE) % len(big)
                selfverify.read(store, key, url, stale, start, start + PAGE)
            later = 1e6 * (time.process_time() - cpu) / args.reads
            print(
                f"stale etag: first read (stat + whole verify of {args.blob_mib} MiB + page) "
                f"{once:.3f} CPU s = {1000 * once / args.blob_mib:.2f} CPU ms/MiB; "
                f"later reads {later:.2f} us/read ({load_average()})"
            )


if __name__ == "__main__":
    main()
