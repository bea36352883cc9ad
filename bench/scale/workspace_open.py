"""A workspace's open (its recovery) over N acknowledged files: peak RSS and CPU, this tree against another, same run.

    .venv/bin/python bench/scale/workspace_open.py BASE_TREE [--files 100000 1000000] [--scratch DIR] [--reuse]

recover19, issues 38/41. Opening a workspace runs ``_recover`` (``datahub/writeback``), which
held a decoded record per file and a dict of every path per file id: 2.2 GiB of RSS to open
10^6 files (flushmem19); recover20: and one write transaction rewriting every unverified
record. For each N the workspace of ``workspace_harness.py`` (N files of ~70 bytes, built once
by the base tree's writers, left as a crash leaves them) is copied fresh for each side, which,
in a process of its own with its own ``datahub``, imports, then opens it
(``background=False``) and asks ``dirty(limit=1)`` (a tree before recover19: ``dirty()``, the
whole list) whether anything is dirty, as ``open_workspace`` does in the background. Printed:
RSS after the imports, ``VmHWM`` (the journal's mapped pages count there too) and the
sampled peak of ``RssAnon`` (the heap) during the open, ``RssAnon`` after it (what the open
still holds), the open's wall, CPU and CPU microseconds per file, and the same for the
``dirty()`` call; then the CPU of the first question asked of the packs' live sets (packs38
sorts the offsets an open adopted in then), ``RssAnon`` after ``malloc_trim(0)`` and without
the live sets (``_held_by_packs``: what of it is the one thing an open keeps per file).

Wall swings with the shared machine's load (printed); CPU and RSS are the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

try:
    from bench.scale import workspace_harness as harness
except ImportError:  # a child on a base tree without the harness, run from this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import workspace_harness as harness  # type: ignore[no-redef]

_AnonPeak, _config, _load = harness._AnonPeak, harness._config, harness._load
_reset_peak, _status_mib = harness._reset_peak, harness._status_mib


def measure_open(home: str, files: int) -> dict:
    """Open the prepared workspace, measured (see the module docstring); leaves it unflushed."""
    import datahub
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    config = _config(home)
    out: dict = {"datahub": os.path.dirname(datahub.__file__), "files": files}
    with StoreRegistry(config) as stores:
        out["rss_imported_mib"] = _status_mib("VmRSS")
        _reset_peak()
        anon = _AnonPeak()
        wall, cpu = time.perf_counter(), time.process_time()
        ws = open_workspace("ws", config, stores, background=False)
        cpu = time.process_time() - cpu
        out["open_wall_s"] = round(time.perf_counter() - wall, 1)
        out["open_cpu_s"] = round(cpu, 1)
        out["open_cpu_us_per_file"] = round(cpu * 1e6 / files, 1)
        out["open_peak_rss_mib"] = _status_mib("VmHWM")
        out["open_peak_rss_anon_mib"] = anon.stop()
        out["rss_anon_after_open_mib"] = _status_mib("RssAnon")
        _reset_peak()
        anon = _AnonPeak()
        wall, cpu = time.perf_counter(), time.process_time()
        try:  # what ``open_workspace`` asks in the background: whether anything is dirty
            dirty = bool(ws.dirty(limit=1))
        except TypeError:  # a tree before recover19: the whole list
            dirty = bool(ws.dirty())
        cpu = time.process_time() - cpu
        out["dirty"] = dirty
        out["dirty_wall_s"] = round(time.perf_counter() - wall, 1)
        out["dirty_cpu_s"] = round(cpu, 2)
        out["dirty_peak_rss_anon_mib"] = anon.stop()
        out |= _held_by_packs(ws)
        ws.abandon()
    return out


def _held_by_packs(ws) -> dict:
    """What of the anonymous RSS after the open the packs' live sets hold (an offset per live
    member, ``packs.py``: kept for the session, they decide when a pack goes; a ``set`` before
    packs38, a sorted array and a byte a member after): ``RssAnon``
    after ``malloc_trim(0)``, then with every live set emptied and trimmed again (the
    workspace is abandoned right after: its packs are not used again)."""
    import ctypes
    import gc

    trim = ctypes.CDLL("libc.so.6").malloc_trim
    packs = [p for group in ws.chunks._all_packs for p in group._packs.values()]
    cpu = time.process_time()  # packs38 sorts the adopted offsets in at the first question
    out = {"pack_members_live": sum(len(p.live) for p in packs)}
    out["live_sets_settle_cpu_s"] = round(time.process_time() - cpu, 2)
    trim(0)
    out["rss_anon_trimmed_mib"] = _status_mib("RssAnon")
    for pack in packs:
        pack.live = type(pack.live)()  # a set on a base before packs38, ``_Members`` after
    gc.collect()
    trim(0)
    out["rss_anon_without_live_sets_mib"] = _status_mib("RssAnon")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--files", type=int, nargs="+", default=[100_000])
    ap.add_argument("--scratch", default=harness.SCRATCH)
    ap.add_argument("--reuse", action="store_true", help="a workspace built by an earlier run, if there")
    ap.add_argument("--open", metavar="HOME")
    args = ap.parse_args(argv)
    if args.open:
        print(json.dumps(measure_open(args.open, args.files[0])), flush=True)
        return
    trees = harness.trees_of(args.base_tree)
    for k, n in enumerate(args.files):
        pristine = harness.built(args.scratch, n, trees.get("base", harness.HEAD), args.reuse)
        for name, tree in harness.each_side(trees, k, pristine, harness.home_of(args.scratch, n)):
            print(f"{n} files, open on {name}: {_load()}", flush=True)
            home = str(harness.home_of(args.scratch, n))
            print(
                f"  {json.dumps(harness.child(Path(__file__).resolve(), tree, '--open', home, '--files', str(n)))}"
            )
        print(f"  after: {_load()}", flush=True)
        if not args.reuse:
            shutil.rmtree(pristine, ignore_errors=True)


if __name__ == "__main__":
    main()
