"""What the user-metadata probe (probe21, ``S3Writes.keeps_records``) adds to a workspace open.

    .venv/bin/python bench/writeback/probe_cost.py [--rounds 20]

One moto server (keep-alive, as a real store serves) and, per round, two cold starts, in
alternating order: a fresh ``StoreRegistry`` (so a fresh store object, whose answer is not
remembered yet), ``open_workspace`` on an S3 shared tier, and one new 100-byte file written
and closed (the first close that could be covered, which runs the probe). ``probe``: as
shipped. ``known``: the store's answer set before the open (``_records_kept = True``), so
the same work without the probe: the same-run baseline. Figures: median wall and process
CPU (this process: the daemon side; moto runs in its own) of open + first close, and the
requests moto logged for the shared bucket in each. The machine is shared: load printed.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
from tests.servers import MotoServer


def _one(
    moto: MotoServer, scratch: str, bucket: str, n: int, known: bool
) -> tuple[float, float, collections.Counter]:
    overrides: dict = {
        "home": f"{scratch}/var{n}",
        "cache": {"flush_interval": 3600, "shared_url": f"s3://{bucket}/node{n}"},
        **moto.endpoint.s3_config_overrides(),
    }
    config = load_config(env={}, overrides=overrides)
    stores = StoreRegistry(config)
    try:
        if known:
            stores.shared_store(config.resolved_shared_url)._records_kept = True
        mark = moto.log_size()
        cpu, wall = time.process_time(), time.monotonic()
        ws = open_workspace("ws", config, stores, background=False)
        ws.journal.defer_seconds = 3600.0  # the deferred commit stays, so the check below sees it
        with ws.open("f", create=True) as fh:
            fh.write(0, b"x" * 100)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        sent = collections.Counter(m for m, _t, _s in moto.answered(bucket, since=mark))
        assert ws.journal.deferred() == 1, "the first close was not covered"
        ws.abandon()
        return wall, cpu, sent
    finally:
        stores.close()


def _warm(moto: MotoServer, bucket: str, rounds: int) -> None:
    """The probe alone on one store object whose client has sent each request kind before
    (its answer forgotten before each probe): what the three requests cost once boto3's
    first-use work (operation models, handlers) is done; a cold store pays that too."""
    config = load_config(env={}, overrides={"home": "/nonexistent", **moto.endpoint.s3_config_overrides()})
    stores = StoreRegistry(config)
    try:
        store = stores.shared_store(f"s3://{bucket}/warm")
        rows = []
        for r in range(rounds + 1):
            store._records_kept = None
            cpu, wall = time.process_time(), time.monotonic()
            assert store.keeps_records(f"probe-{r}")
            if r:
                rows.append((time.monotonic() - wall, time.process_time() - cpu))
        wall = statistics.median(w for w, _ in rows) * 1e3
        cpu = statistics.median(c for _, c in rows) * 1e3
        print(
            f"warm probe alone (PUT+HEAD+DELETE), median of {len(rows)}: wall {wall:.1f} ms, CPU {cpu:.1f} ms"
        )
    finally:
        stores.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    moto = MotoServer(keep_alive=True)
    try:
        bucket = moto.endpoint.new_bucket("probe")
        figures: dict[str, list[tuple[float, float]]] = {"probe": [], "known": []}
        requests: dict[str, collections.Counter] = {}
        print(f"load before: {os.getloadavg()}")
        with tempfile.TemporaryDirectory(prefix="probe21-bench-") as scratch:
            n = 0
            for r in range(args.rounds + 1):
                order = ("probe", "known") if r % 2 else ("known", "probe")
                for name in order:
                    n += 1
                    wall, cpu, sent = _one(moto, scratch, bucket, n, known=name == "known")
                    if r:  # round 0 warms imports and the server
                        figures[name].append((wall, cpu))
                        requests[name] = sent
        print(f"load after: {os.getloadavg()}")
        for name, rows in figures.items():
            wall = statistics.median(w for w, _ in rows) * 1e3
            cpu = statistics.median(c for _, c in rows) * 1e3
            print(f"{name}: open + first close, median of {len(rows)}: wall {wall:.1f} ms, CPU {cpu:.1f} ms, "
                  f"requests to the shared bucket {dict(sorted(requests[name].items()))}")  # fmt: skip
        extra = {
            what: statistics.median(p[i] for p in figures["probe"]) - statistics.median(k[i] for k in figures["known"])
            for i, what in enumerate(("wall", "cpu"))
        }  # fmt: skip
        print(
            f"probe adds (median difference): wall {extra['wall'] * 1e3:.1f} ms, CPU {extra['cpu'] * 1e3:.1f} ms"
        )
        _warm(moto, bucket, args.rounds)
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
