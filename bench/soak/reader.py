"""A reader on one node: random files of several versions, through the mount or ``datahub://``.

Run inside the node's network namespace by the soak (``python -m bench.soak.reader``). Each
read's bytes are hashed here and compared with the manifest the harness wrote before the
run; the event says right, wrong, or which clean error. ``--until`` (a wall-clock time)
stops it; it never retries a read (a retry would hide a wrong answer's cause).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

from bench.soak.errors import classify
from bench.soak.events import EventLog, Inflight


def _opener(via: str, root: str, config: str):
    if via == "mount":

        def read(ds: str, seq: int, key: str) -> bytes:
            with open(Path(root) / ds / f"v{seq}" / key, "rb") as fh:
                return fh.read()

        return read
    from datahub.fs import DatahubFileSystem

    fs = DatahubFileSystem(config_path=config, skip_instance_cache=True)

    def read_fs(ds: str, seq: int, key: str) -> bytes:
        return fs.cat_file(f"{ds}@{seq}/{key}")

    return read_fs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--via", choices=["mount", "fs"], required=True)
    ap.add_argument("--root", default="", help="the mount point (--via mount)")
    ap.add_argument("--config", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--inflight", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--until", type=float, required=True, help="stop at this wall-clock time")
    ap.add_argument(
        "--rate", type=float, default=40.0, help="at most this many reads a second (a shared machine)"
    )
    args = ap.parse_args(argv)
    manifest = json.loads(Path(args.manifest).read_text())["datasets"]
    files = sorted(
        (ds, int(seq), key, meta["sha"], meta["size"])
        for ds, versions in manifest.items()
        for seq, keys in versions.items()
        for key, meta in keys.items()
    )
    rng = random.Random(f"{args.seed}-{args.node}-{args.via}")
    log, inflight = EventLog(Path(args.events)), Inflight(Path(args.inflight))
    read = None
    gap = 1.0 / args.rate if args.rate > 0 else 0.0
    next_at = time.monotonic()
    while time.time() < args.until:
        next_at = max(next_at + gap, time.monotonic() - 1.0)
        time.sleep(max(0.0, next_at - time.monotonic()))
        ds, seq, key, sha, size = rng.choice(files)
        inflight.begin(f"{args.via} {ds}@{seq}/{key}")
        t0 = time.monotonic()
        event: dict = {"node": args.node, "via": args.via, "ds": ds, "v": seq, "key": key}
        try:
            if read is None:
                read = _opener(args.via, args.root, args.config)
            data = read(ds, seq, key)
        except Exception as exc:  # every failure is classified and logged; the reader goes on
            event.update(ok=False, err=classify(exc))
        else:
            good = len(data) == size and hashlib.sha256(data).hexdigest() == sha
            event.update(ok=good, bytes=len(data), wrong=not good)
        event["dt"] = round(time.monotonic() - t0, 4)
        inflight.end()
        log.write(event)
        if not event["ok"]:
            time.sleep(0.05)  # a failing node: do not spin
    log.write({"node": args.node, "via": args.via, "done": True}, durable=True)


if __name__ == "__main__":
    main()
