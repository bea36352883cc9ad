"""Remote catalog vs direct SQLite (issue 16 goal: remote listing rate / direct >= 0.5).

    .venv/bin/python bench/catalog/remote_listing.py [--records 200000] [--fraction 0.01]

A SQLite catalog with ``--records`` records (v1) and a ``--fraction`` change (v2) is built
directly; then ``datahub serve --local`` runs over that file in its OWN process (127.0.0.1, a
free port), so client and server do not share a GIL, as on a real node. In this process:

1. list v2 completely, direct (``sqlite:///``) and remote (``http://127.0.0.1:port``);
2. diff v1..v2 both ways;
3. commit a further ``--fraction`` change (puts of new etags) both ways (on two datasets of the same shape, so
   each commits onto the same base size).

Each figure is the best of ``--repeat`` runs, with the load average (``uptime``) printed beside
it: the machine may be shared, and the ratio only means something when both sides ran under
similar load. ``--profile FILE`` writes a cProfile of one remote listing (client side).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import full_changes, record, small_changes, uptime

from datahub.catalog import Put, open_catalog

GOAL = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: str, db: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, DATAHUB_HOME=os.path.join(workdir, "home"), DATAHUB_CATALOG_URL=f"sqlite:///{db}")
    env.pop("DATAHUB_API_TOKEN", None)
    cmd = [
        sys.executable,
        "-c",
        "from datahub.cli.main import main; main()",
        "serve",
        "--local",
        "--no-labelx",
        "--host",
        "127.0.0.1",
    ]
    proc = subprocess.Popen([*cmd, "--port", str(port)], env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"datahub serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/v1/datasets", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("datahub serve did not answer within 60 s")


def modify(n: int, fraction: float) -> Iterator[Put]:
    """``fraction`` of the records replaced (a new etag), spread over the key space."""
    return (Put(record(i, generation=2)) for i in range(0, n, round(1 / fraction)))


def best(label: str, fn: Callable[[], Any], repeat: int) -> tuple[float, Any, str]:
    """Best wall time of ``repeat`` runs, the value, and the load at the start."""
    load = uptime()
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    print(f"{label:<32} {min(times):8.3f} s (best of {repeat}) | {load}", flush=True)
    return min(times), value, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default=None, help="write a cProfile of one remote listing here")
    args = parser.parse_args()
    n = args.records
    workdir = tempfile.mkdtemp(prefix="bench-remote-listing-")
    db = os.path.join(workdir, "catalog.db")
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    print(
        f"remote listing: {n:,} records, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"git {git.stdout.strip() or '?'}, {os.cpu_count()} CPUs"
    )
    server = None
    try:
        direct = open_catalog(f"sqlite:///{db}")
        for name in ("direct", "remote"):
            direct.create_dataset(name)
            direct.commit(name, full_changes(n))
            direct.commit(name, small_changes(n, args.fraction))
        server, url = start_server(workdir, db)
        print(f"server pid {server.pid} at {url}")
        remote = open_catalog(url)
        rows: dict[str, dict[str, tuple[float, Any, str]]] = {}
        for side, catalog in (("direct", direct), ("remote", remote)):
            rows[side] = {
                "list": best(
                    f"{side} list v2",
                    lambda c=catalog: sum(1 for _ in c.list_records("direct", 2)),
                    args.repeat,
                ),
                "diff": best(
                    f"{side} diff v1..v2",
                    lambda c=catalog: sum(1 for _ in c.diff("direct", 1, 2)),
                    args.repeat,
                ),
            }
        for side, catalog in (("direct", direct), ("remote", remote)):
            rows[side]["commit"] = best(
                f"{side} commit {args.fraction:.0%}",
                lambda c=catalog, s=side: c.commit(s, modify(n, args.fraction), base=2),
                1,
            )
        if args.profile:
            cProfile.runctx(
                "sum(1 for _ in remote.list_records('direct', 2))",
                globals(),
                {"remote": remote},
                args.profile,
            )
            print(f"client profile written to {args.profile}")
        remote.close()
        direct.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print("| operation | direct | remote | remote / direct | uptime (direct; remote) |")
    print("|---|---|---|---|---|")
    for op, unit in (("list", "records/s"), ("diff", "entries/s"), ("commit", "s")):
        (dt, dv, dl), (rt, rv, rl) = rows["direct"][op], rows["remote"][op]
        if op == "commit":
            d, r, ratio = f"{dt:.3f} s", f"{rt:.3f} s", dt / rt
        else:
            assert dv == rv, f"{op}: direct gave {dv}, remote {rv}"
            d, r, ratio = f"{dv / dt:,.0f} {unit}", f"{rv / rt:,.0f} {unit}", dt / rt
        la = lambda s: s.split("load average:")[-1].strip()  # noqa: E731
        print(f"| {op} | {d} | {r} | **{ratio:.2f}** | {la(dl)}; {la(rl)} |")
    ratio = rows["direct"]["list"][0] / rows["remote"]["list"][0]
    print(
        f"\nlisting rate remote / direct = {ratio:.3f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
