"""CPU of the body nesting scan (issue 24 item 1) against parsing the same body, in one process.

    .venv/bin/python bench/api/body_depth.py [--mb 53] [--small 20000] [--repeat 3]

Every request body now goes through ``datahub.api.body_depth.DepthScanner`` as it arrives.
Figures, best of ``--repeat``, process CPU time:

- a commit body of about ``--mb`` MB (puts with small meta and labels, strings holding
  brackets and escaped quotes), fed in 64 KiB chunks as uvicorn hands them on; baselines in
  the same run: ``json.loads`` of the body, and the commit route's own parse
  (``CommitBody``: both passes, every change validated);
- two hostile bodies of 20 MB (one string of escaped quotes; strings holding brackets),
  against ``json.loads`` of each;
- ``--small`` typical small bodies (a one-put commit, ~300 bytes), scanned one by one, per
  body; baseline: ``json.loads`` + ``CommitCreate.model_validate_json`` of each.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.api.body_depth import DepthScanner
from datahub.api.commit_body import CommitBody
from datahub.api.schemas import CommitCreate

CHUNK = 64 * 1024


def change(i: int) -> dict:
    return {
        "op": "put",
        "record": {
            "key": f"train/{i % 100:02d}/{i:09d}.jpg",
            "url": f"s3://bucket/train/{i:09d}.jpg",
            "etag": f"{i:032x}",
            "size": 1000 + i,
            "meta": {"split": "train", "box": [1, 2, {"w": 3, "note": 'a "[quoted]" {x}'}]},
            "labels": {"class": "cat" if i % 2 else "dog", "score": 0.5},
        },
    }


def big_body(target: int) -> bytes:
    one = len(json.dumps(change(0))) + 2
    return json.dumps({"message": "bench", "changes": [change(i) for i in range(target // one)]}).encode()


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def best(fn, repeat: int) -> float:
    return min(cpu(fn) for _ in range(repeat))


def scan(body: bytes) -> None:
    scanner = DepthScanner()
    for at in range(0, len(body), CHUNK):
        scanner.feed(body[at : at + CHUNK], last=at + CHUNK >= len(body))


def parse_commit(body: bytes) -> None:
    parsed = CommitBody(body)
    for _ in parsed.changes():
        pass


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=53)
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, commit {commit}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    body = big_body(int(args.mb * 1e6))
    mb = len(body) / 1e6
    t_scan = best(lambda: scan(body), args.repeat)
    t_json = best(lambda: json.loads(body), args.repeat)
    t_route = best(lambda: parse_commit(body), 1)
    print(
        f"large body {mb:.1f} MB: scan {t_scan:.2f} s CPU ({mb / t_scan:.0f} MB/s); baselines: json.loads "
        f"{t_json:.2f} s, the commit route's parse {t_route:.2f} s; scan / route parse = {t_scan / t_route:.2f}"
    )
    for name, hostile in (
        ("20 MB of escaped quotes in one string", b'{"a": "' + b'\\"' * 10_000_000 + b'"}'),
        ('20 MB of "[" strings', b"[" + b'"[",' * 5_000_000 + b"1]"),
    ):
        t_hostile = best(lambda body=hostile: scan(body), args.repeat)
        t_hostile_json = best(lambda body=hostile: json.loads(body), args.repeat)
        print(f"{name}: scan {t_hostile:.2f} s CPU; baseline json.loads {t_hostile_json:.2f} s")
    small = json.dumps({"changes": [change(7)]}).encode()
    n = args.small
    t_small = best(lambda: [scan(small) for _ in range(n)], args.repeat)
    t_small_base = best(lambda: [CommitCreate.model_validate_json(small) for _ in range(n)], args.repeat)
    print(
        f"small body {len(small)} B x {n}: scan {t_small / n * 1e6:.1f} us CPU per body; baseline: "
        f"model_validate_json {t_small_base / n * 1e6:.1f} us per body; ratio {t_small / t_small_base:.2f}"
    )


if __name__ == "__main__":
    main()
