"""CPU of local mode's per-request owner check (audit14): the kernel's socket table asked for one
connection (``datahub.api.local_mode.peer_uid``, sock_diag) against reading ``/proc/net/tcp``
and finding the connection's line in it (the first version of the check, kept here as the
baseline), in one process, in alternation.

    .venv/bin/python bench/api/local_peer_lookup.py [--sockets 0 2000] [--lookups 500] [--rounds 4]

For each count of extra loopback connections held open (two sockets each), ``--rounds`` pairs
of A (sock_diag) and B (/proc/net/tcp) runs of ``--lookups`` lookups each; prints the CPU
(user + system, ``time.process_time``) per lookup of every run and the medians, the lines of
``/proc/net/tcp`` (every TCP socket of the network namespace, other programs' too) and the
load average before and after. Wall time is not reported: the machine is shared.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.api.local_mode import peer_uid


def _proc_address(host: str, port: int) -> str:
    packed = ipaddress.ip_address(host).packed
    words = (int.from_bytes(packed[i : i + 4], sys.byteorder) for i in range(0, len(packed), 4))
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def proc_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The baseline: the whole table read, the connection's line found with one bytes search."""
    needle = f" {_proc_address(*client)} {_proc_address(*server)} ".encode()
    with open("/proc/net/tcp", "rb") as table:
        text = table.read()
    start = text.find(needle)
    if start < 0:
        return None
    fields = text[start : text.find(b"\n", start)].split()
    return int(fields[6]) if fields[8] != b"0" else None


def cpu_per_lookup(lookup, client, server, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        assert lookup(client, server) == os.geteuid()
    return (time.process_time() - start) / n * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, nargs="+", default=[0, 2000])
    parser.add_argument("--lookups", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    server = listener.getsockname()
    client = socket.create_connection(server)
    listener.accept()
    held: list[socket.socket] = []
    for extra in sorted(args.sockets):
        while len(held) < 2 * extra:
            held.append(socket.create_connection(server))
            held.append(listener.accept()[0])
        with open("/proc/net/tcp", "rb") as table:
            lines = table.read().count(b"\n") - 1
        a, b = [], []
        for _ in range(args.rounds):
            a.append(cpu_per_lookup(peer_uid, client.getsockname(), server, args.lookups))
            b.append(cpu_per_lookup(proc_uid, client.getsockname(), server, args.lookups))
        print(
            f"{extra} extra connections, /proc/net/tcp {lines} lines: CPU per lookup, "
            f"A sock_diag {[round(x, 1) for x in a]} median {statistics.median(a):.1f} us; "
            f"B /proc/net/tcp {[round(x) for x in b]} median {statistics.median(b):.0f} us"
        )
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
