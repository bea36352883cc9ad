"""CPU per small file's close of its cover record, unplaced (before cover24) against placed.

    .venv/bin/python bench/writeback/cover_place_cost.py [--closes 200000] [--rounds 5]

cover24: a pack's cover record is ``DHWBREC3``, its CRC-32 seeded with its place
(``packs.place_seed``), so the close's ``ChunkStore.renumber_cover`` now finds the pack of the
key, parses its offset and computes one CRC of 24 bytes more. This loops what a close does to
its record (``ChunkStore.cover_trailer``, then the numbered bytes) in one process, the two ways
in turns: "before" calls ``packs.renumber_cover`` with the journal's seed alone, as the code
before cover24 did (``chunks.py``: ``renumber_cover(trailer, cover, cover_seed(journal))``);
"after" calls today's ``ChunkStore.renumber_cover(trailer, cover, key, length)``, keyed since
wbgaps25 (``DHWBREC4``: the chunk store has its journal's ``cover_key``, as every opened journal
does, so the record also gets a BLAKE2b MAC; to compare the MAC's cost, run this file of both
trees, the base's and this one's, one after the other, and compare their "after"). Prints CPU
(``time.process_time``) per close, per round and the medians. The whole close through a
workspace is ``close_cpu_ab.py`` (a tree of the base against this one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from datahub.storage.local import LocalStore
from datahub.writeback.chunks import ChunkStore
from datahub.writeback.packs import cover_seed, renumber_cover


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--closes", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cover-place-") as root:
        chunks = ChunkStore(
            LocalStore(Path(root)), "writeback/ws", "workspace 'ws'", 32 << 20, "0123456789abcdef"
        )
        record = {"id": 0x1234, "path": "train/shard-0001/img-000123.jpg", "size": 102400,
                  "mtime": 1.7e9 + 0.25, "len": 102400, "crc": "x3:0123456789abcdef"}  # fmt: skip
        key = f"{chunks.prefix}/packs/89abcdef01234567/1234.0.1f4a00"
        plain = ChunkStore(
            LocalStore(Path(root)), "writeback/ws", "workspace 'ws'", 32 << 20, "0123456789abcdef"
        )  # no key: the template as before cover24
        if hasattr(chunks, "cover_key"):  # since wbgaps25: keyed, as an opened journal's store
            chunks.cover_key = os.urandom(32)

        def before(n: int) -> None:
            for c in range(1, n + 1):
                template = plain.cover_trailer(0, record)
                renumber_cover(template, c, cover_seed(chunks.journal))

        def after(n: int) -> None:
            for c in range(1, n + 1):
                template = chunks.cover_trailer(0, record)
                chunks.renumber_cover(template, c, key, 102400)

        got: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(args.rounds):
            order = (
                [("before", before), ("after", after)]
                if r % 2 == 0
                else [("after", after), ("before", before)]
            )
            for name, loop in order:
                c0 = time.process_time()
                loop(args.closes)
                us = (time.process_time() - c0) / args.closes * 1e6
                got[name].append(us)
                print(f"round {r + 1} {name}: {us:.2f} µs CPU per close", flush=True)
        b, a = statistics.median(got["before"]), statistics.median(got["after"])
        print(f"{args.closes:,} closes x {args.rounds} rounds, medians: before {b:.2f} µs, after {a:.2f} µs, "
              f"{a - b:+.2f} µs per close")  # fmt: skip


if __name__ == "__main__":
    main()
