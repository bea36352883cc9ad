"""The packs' live sets, candidates side by side: memory per member and CPU per member.

    .venv/bin/python bench/scale/workspace_live_sets.py [--members 100000 1000000] [--per-pack 150000]

packs38, issues 38/41. A pack's live members (``packs.py``) decide when the pack is deleted,
and were held as a ``set`` of Python ints for the whole session: 85 bytes a packed chunk, 81
MiB at 10^6 (recover20). Candidates, each in a process of its own, over the same members
(``--per-pack`` to a pack, offsets 200 bytes apart, adopted in a shuffled order as an open
adopts the journal's keys, 4,096 a batch), then every member but one a pack deleted, then one
stale delete per member (keys of an earlier session, as the collector deletes a listed key
again after a crash: each must be refused, never counted):

- ``set``: the ``set`` of offsets (the base);
- ``array``: ``packs._Members``, a sorted ``array`` of offsets and a byte each saying whether it is alive (the head);
- ``lmdb``: the membership in an LMDB table (key: pack token and offset) beside a count per
  pack in the heap, written 4,096 members a transaction (``delete`` answers whether it was
  there); its memory is the map's pages (``RssFile``), not the heap.

A count of live members alone is not measured: it cannot refuse a stale delete (the test
``tests/writeback/test_packs38.py`` shows the pack unlinked under a live member).

Printed per candidate: ``RssAnon`` held after the adoption (after ``malloc_trim``), its peak
during the adoption, ``RssFile`` growth, CPU microseconds per member adopted, deleted and
stale-deleted. CPU is the figure; wall swings with the shared machine's load.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HEAD))
from bench.scale.workspace_commit import _AnonPeak, _load, _status_mib  # noqa: E402

BATCH = 4096
CANDIDATES = ("set", "array", "lmdb")


def _members(n: int, per_pack: int) -> list[tuple[int, str]]:
    """(pack, offset in hex, as a member key has it) of ``n`` members, shuffled within windows
    of 3 batches: the journal lists files by id, and concurrent writers put neighbouring ids in
    one pack, not in order. Each candidate parses the offsets (a Python int of its own each,
    as ``Packs`` parses a key), so none shares the int objects of this list."""
    out = [(i // per_pack, f"{(i % per_pack) * 200:x}") for i in range(n)]
    rng = random.Random(38)
    for start in range(0, n, 3 * BATCH):
        window = out[start : start + 3 * BATCH]
        rng.shuffle(window)
        out[start : start + 3 * BATCH] = window
    return out


class _SetLive:
    def __init__(self) -> None:
        self.packs: dict[int, set[int]] = {}

    def adopt(self, batch):
        for pack, offset in batch:
            self.packs.setdefault(pack, set()).add(int(offset, 16))

    def delete(self, pack: int, offset: str) -> bool:
        offset = int(offset, 16)
        live = self.packs.get(pack)
        if live is None or offset not in live:
            return False
        live.discard(offset)
        if not live:
            del self.packs[pack]
        return True


class _ArrayLive:
    def __init__(self) -> None:
        from datahub.writeback.packs import _Members

        self.members = _Members
        self.packs: dict = {}

    def adopt(self, batch):
        for pack, offset in batch:
            live = self.packs.get(pack)
            if live is None:
                live = self.packs[pack] = self.members()
            live.adopt(int(offset, 16))

    def delete(self, pack: int, offset: str) -> bool:
        live = self.packs.get(pack)
        left = live.discard(int(offset, 16)) if live is not None else None
        if left is None:
            return False
        if not left:
            del self.packs[pack]
        return True


class _LmdbLive:
    def __init__(self, directory: str) -> None:
        import lmdb

        self.env = lmdb.open(directory, map_size=1 << 34, subdir=True, sync=False, metasync=False)
        self.count: dict[int, int] = {}

    @staticmethod
    def _key(pack: int, offset: str) -> bytes:
        return pack.to_bytes(8, "big") + int(offset, 16).to_bytes(4, "big")

    def adopt(self, batch):
        with self.env.begin(write=True) as txn:
            for pack, offset in batch:
                if txn.put(self._key(pack, offset), b"", overwrite=False):
                    self.count[pack] = self.count.get(pack, 0) + 1

    def delete(self, pack: int, offset: str) -> bool:
        with self.env.begin(write=True) as txn:
            if not txn.delete(self._key(pack, offset)):
                return False
        self.count[pack] -= 1
        if not self.count[pack]:
            del self.count[pack]
        return True


def measure(candidate: str, n: int, per_pack: int, scratch_dir: str = "/var/tmp") -> dict:
    """One candidate over ``n`` members (the module docstring); its LMDB under ``scratch_dir``."""
    trim = ctypes.CDLL("libc.so.6").malloc_trim
    members = _members(n, per_pack)
    scratch = tempfile.mkdtemp(prefix="live-sets-", dir=scratch_dir)
    live = {"set": _SetLive, "array": _ArrayLive, "lmdb": lambda: _LmdbLive(scratch)}[candidate]()
    trim(0)
    out: dict = {"candidate": candidate, "members": n, "per_pack": per_pack}
    anon0, file0 = _status_mib("RssAnon"), _status_mib("RssFile")
    peak = _AnonPeak()
    cpu = time.process_time()
    for start in range(0, n, BATCH):
        live.adopt(members[start : start + BATCH])
    out["adopt_cpu_us"] = round((time.process_time() - cpu) * 1e6 / n, 2)
    out["adopt_peak_anon_mib"] = round(peak.stop() - anon0, 1)
    trim(0)
    out["held_anon_mib"] = round(_status_mib("RssAnon") - anon0, 1)
    out["held_bytes_per_member"] = round(out["held_anon_mib"] * 2**20 / n, 1)
    out["file_mib"] = round(_status_mib("RssFile") - file0, 1)
    doomed = [m for m in members if m[1] != "0"]  # every member but the first of each pack
    cpu = time.process_time()
    assert all(live.delete(p, o) for p, o in doomed)
    out["delete_cpu_us"] = round((time.process_time() - cpu) * 1e6 / len(doomed), 2)
    cpu = time.process_time()
    assert not any(live.delete(p, o) for p, o in doomed)
    out["stale_delete_cpu_us"] = round((time.process_time() - cpu) * 1e6 / len(doomed), 2)
    trim(0)
    out["anon_after_deletes_mib"] = round(_status_mib("RssAnon") - anon0, 1)
    subprocess.run(["rm", "-rf", scratch], check=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, nargs="+", default=[100_000])
    ap.add_argument("--per-pack", type=int, default=150_000)
    ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    ap.add_argument("--child", metavar="CANDIDATE")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.members[0], args.per_pack)), flush=True)
        return
    for n in args.members:
        for candidate in args.candidates:
            print(f"{n} members, {candidate}: {_load()}", flush=True)
            cmd = [sys.executable, "-P", __file__, "--child", candidate, "--members", str(n)]
            cmd += ["--per-pack", str(args.per_pack)]
            out = subprocess.run(
                cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(HEAD)}
            )
            if out.returncode != 0:
                raise SystemExit(out.stderr[-3000:])
            print(f"  {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
