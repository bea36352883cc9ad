"""Peak memory of the API server for one large commit (issue 12 item 3: goal <= 3x the body).

    .venv/bin/python bench/api/commit_memory.py [--mb 59] [--concurrent 1]

Starts ``datahub serve`` (local mode, 127.0.0.1) in its own process, creates a dataset and
POSTs a commit body of about ``--mb`` MB (``--concurrent`` of them at once), each change a
put with a small meta. Reports the server's VmHWM (peak RSS, from /proc/<pid>/status)
after start-up and after the commit(s), the growth, and the growth divided by the body
bytes sent. Baseline = the same server's VmHWM before the commit.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_import_api import served  # noqa: E402 - the sibling bench owns the server helpers


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def commit_body(target_bytes: int, prefix: str) -> bytes:
    one = {
        "op": "put",
        "record": {
            "key": f"{prefix}/000000000.jpg",
            "url": f"s3://bucket/{prefix}/000000000.jpg",
            "etag": "0123456789abcdef0123456789abcdef",
            "size": 123456,
            "meta": {"split": "train", "width": 640, "height": 480},
            "labels": {"class": "cat"},
        },
    }
    n = target_bytes // (len(json.dumps(one)) + 2)
    changes = []
    for i in range(n):
        changes.append(
            {
                **one,
                "record": {
                    **one["record"],
                    "key": f"{prefix}/{i:09d}.jpg",
                    "url": f"s3://bucket/{prefix}/{i:09d}.jpg",
                },
            }
        )
    return json.dumps({"changes": changes, "message": "bench"}).encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=59.0)
    ap.add_argument("--concurrent", type=int, default=1)
    args = ap.parse_args()
    bodies = [commit_body(int(args.mb * 1e6), f"c{i}") for i in range(args.concurrent)]
    sent = sum(len(b) for b in bodies)
    with (
        tempfile.TemporaryDirectory() as home,
        served(home) as (url, _, pid),
        httpx.Client(base_url=url, timeout=600) as client,
    ):
        assert client.post("/v1/datasets", json={"name": "ds"}).status_code == 201
        before = vm_hwm_mib(pid)
        statuses: list[int] = []
        errors: list[str] = []

        def send(body: bytes) -> None:
            r = client.post(
                "/v1/datasets/ds/commits", content=body, headers={"Content-Type": "application/json"}
            )
            statuses.append(r.status_code)
            if r.status_code != 201:
                errors.append(r.json().get("error", {}).get("message", r.text)[:200])

        t0 = time.monotonic()
        threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.monotonic() - t0
        after = vm_hwm_mib(pid)
    grown = after - before
    print(
        f"body: {args.concurrent} x {len(bodies[0]) / 1e6:.1f} MB ({sent / 2**20:.1f} MiB sent), statuses {statuses}"
    )
    for message in errors:
        print(f"  refused: {message}")
    print(f"server VmHWM: {before:.0f} MiB after start-up, {after:.0f} MiB after the commit(s) ({dt:.1f} s)")
    print(
        f"growth {grown:.0f} MiB = {grown * 2**20 / sent:.1f}x the body bytes; peak = {after * 2**20 / sent:.1f}x"
    )


if __name__ == "__main__":
    main()
