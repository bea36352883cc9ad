"""moto's server CPU per S3 request: ``moto_server`` against the tests' launcher (tests/moto_launch.py).

Each round starts one server of each kind in turn (alternating, so both see the same load),
warms it with 50 PUTs, then sends N PUTs (``MotoServer.put_objects``, as the bucket fixtures
fill their buckets) and N GETs (unsigned like those PUTs; one ``http.client`` connection each, as
``moto_server`` closes every connection) and prints the server process's CPU (utime + stime
from /proc) per request, and the ratio launcher / moto_server of the same round.

    .venv/bin/python -m bench.suite.moto_cpu [--requests 2000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
from pathlib import Path

from tests.moto_launch import MOTO_SERVER
from tests.servers import MotoServer

KINDS = {
    "moto_server": [str(Path(sys.executable).with_name("moto_server"))],
    "launcher": MOTO_SERVER,
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(kind: str, n: int) -> tuple[float, float]:
    """(server CPU-ms per PUT, per GET) of a fresh server of ``kind``."""
    server = MotoServer()  # moto_server's ...
    server.stop()
    server.proc = subprocess.Popen(  # ... replaced by the kind asked for, on the same port and log
        [*KINDS[kind], "-H", "127.0.0.1", "-p", str(server.port)], stdout=server.log, stderr=subprocess.STDOUT
    )
    try:
        from tests.servers import wait_for_port

        wait_for_port(server.port)
        bucket = server.endpoint.new_bucket()
        server.put_objects(bucket, ((f"warm/{i}", b"w" * 2000) for i in range(50)))
        t0 = cpu_seconds(server.proc.pid)
        server.put_objects(bucket, ((f"k/{i:06d}", b"x" * 2000) for i in range(n)))
        t1 = cpu_seconds(server.proc.pid)
        credential = f"{server.endpoint.access_key}/20260101/us-east-1/s3/aws4_request"
        auth = {"Authorization": f"AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders=host, Signature=0"}
        for i in range(n):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            conn.request("GET", f"/{bucket}/k/{i:06d}", headers=auth)
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200 and len(body) == 2000, (resp.status, body[:200])
            conn.close()
        t2 = cpu_seconds(server.proc.pid)
        return (t1 - t0) * 1000 / n, (t2 - t1) * 1000 / n
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}; {args.requests} PUTs and GETs of 2,000 bytes per server")
    for r in range(1, args.rounds + 1):
        got = {kind: one(kind, args.requests) for kind in KINDS}
        (bp, bg), (lp, lg) = got["moto_server"], got["launcher"]
        print(
            f"round {r}: moto_server {bp:.2f} CPU-ms per PUT, {bg:.2f} per GET; "
            f"launcher {lp:.2f} per PUT, {lg:.2f} per GET; ratio {lp / bp:.2f} / {lg / bg:.2f}; "
            f"load {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
