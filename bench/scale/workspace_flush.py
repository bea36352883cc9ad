"""A workspace's flush of N small files: its peak RSS and the disk bytes per file, this tree against another, same run.

    .venv/bin/python bench/scale/workspace_flush.py BASE_TREE [--files 100000 1000000] [--scratch DIR]
        [--flush-seconds S] [--tracemalloc] [--reuse]
    .venv/bin/python bench/scale/workspace_flush.py BASE_TREE --gc [--files 100000 1000000] [--scratch DIR] [--reuse]
    .venv/bin/python bench/scale/workspace_flush.py [BASE_TREE] --disk [--files 10000] [--strace] [--device loop0]
    .venv/bin/python bench/scale/workspace_flush.py --folio-probe --scratch DIR [--device loop0]

flushmem19, issues 38/41. commitmem18 built 10^6 small files through the ``Workspace`` API:
the building process grew to 2.5 GB of RSS while its flush planned (one object per dirty
file), and the build was charged 51 GB of writes. Two measures:

- **The flush's memory** (default). For each N, the workspace of ``workspace_harness.py``
  (N files of ~70 bytes, 1,000 to a directory, built once through the Workspace API of the
  base tree by 8 writer threads, left as a crash leaves it: every close acknowledged,
  nothing flushed) is copied fresh for each side, which, in a process of its own with its
  own ``datahub``, opens it (recovery), resets the peak RSS (``/proc/self/clear_refs``) and
  flushes it all to a local objects store.
  Printed: the RSS and anonymous RSS before the flush (after the open), ``VmHWM`` during the
  flush (the journal's mapped pages count there), the sampled peak of ``RssAnon`` (the
  heap), wall, CPU and CPU microseconds per file, the files done, and the flush's
  ``write_bytes`` per file; ``--tracemalloc`` adds the peak of the Python heap allocated
  during the flush (tracing starts after the open; it costs CPU). ``--flush-seconds S``
  stops a side's flush after S seconds (its figures so far are printed with
  ``"stopped": true``): a 10^6 flush takes longer than this shared machine can give it.
- **The collection of N chunks' garbage** (``--gc``, recover20). That workspace with every
  file unlinked (``unlink_all``: records deleted and their chunks listed as garbage, as
  unlinks do, then left as a crash leaves it; kept as a variant of its own), copied fresh
  for each side, which opens it: its recovery's collection (the first ``Flusher.gc``) goes
  through the N keys. Printed: the collection's CPU per key, the sampled peak of
  ``RssAnon`` during it and ``VmHWM``, and the open's figures around it.
- **Disk bytes per small file** (``--disk``): one process per side builds N files and flushes
  them, and prints per file and phase (open, writes, flush, close) the ``write_bytes`` the
  kernel charged it (``/proc/self/io``) and, with ``--device``, the bytes that reached that
  block device (``/sys/block/DEV/stat``, after a ``sync``): give ``--scratch`` a file system
  of its own, e.g. ext4 on a loop device, so the count is this run's and includes the file
  system's own journal. ``write_bytes`` is not the disk's count: it charges the whole page
  cache folio a write dirties, and this kernel's ext4 caches files in folios of up to
  1 MiB or more, so a 100-byte write after an ``fdatasync`` can be charged 1 MiB
  (``--folio-probe`` shows it). With
  ``--strace`` the process runs under ``strace -ff -y`` and every write and flush call is
  summed by what it wrote to: the journal's LMDB file, packs, chunk files, the flush target
  (temp files and directories included), other; "pages" counts the 4 KiB pages each call
  touched (a 100-byte append after an ``fdatasync`` still writes a whole block).

Wall swings with the shared machine's load (printed); CPU and bytes are the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

try:
    from bench.scale import workspace_harness as harness
except ImportError:  # a child on a base tree without the harness, run from this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import workspace_harness as harness  # type: ignore[no-redef]

_AnonPeak, _config, _content, _load = harness._AnonPeak, harness._config, harness._content, harness._load
_path, _reset_peak, _status_mib = harness._path, harness._reset_peak, harness._status_mib

PER_DIR = 1000
WRITERS = 8
PAGE = 4096


def _write_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("no write_bytes in /proc/self/io")


def _write(ws, files: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    for d in range((files + PER_DIR - 1) // PER_DIR):
        ws.mkdir(f"d{d:05d}")

    def write(first: int) -> None:
        for i in range(first, files, WRITERS):
            with ws.open(_path(i), create=True) as fh:
                fh.write(0, _content(i))

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(write, range(WRITERS)))


def prepare(home: str, files: int) -> dict:
    """N acknowledged, unflushed files under ``home``, left as a crash leaves them."""
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    wall, cpu, wrote = time.perf_counter(), time.process_time(), _write_bytes()
    with StoreRegistry(_config(home)) as stores:
        ws = open_workspace("ws", _config(home), stores, background=False)
        _write(ws, files)
        ws.abandon()
    wrote = _write_bytes() - wrote
    return {
        "files": files,
        "build_wall_s": round(time.perf_counter() - wall, 1),
        "build_cpu_s": round(time.process_time() - cpu, 1),
        "build_write_bytes_per_file": round(wrote / files),
        "build_peak_rss_mib": _status_mib("VmHWM"),
    }


def flush(home: str, files: int, seconds: float | None, trace: bool = False) -> dict:
    """Open the prepared workspace and flush it, measured (see the module docstring)."""
    import threading

    import datahub
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    config = _config(home)
    out: dict = {"datahub": os.path.dirname(datahub.__file__), "files": files}
    with StoreRegistry(config) as stores:
        wall = time.perf_counter()
        ws = open_workspace("ws", config, stores, background=False)
        out["open_wall_s"] = round(time.perf_counter() - wall, 1)
        out["rss_before_mib"] = _status_mib("VmRSS")
        out["rss_anon_before_mib"] = _status_mib("RssAnon")
        if trace:  # after the open: its recovery's heap (a record per file) is not the flush's
            import tracemalloc

            tracemalloc.start()
        _reset_peak()
        anon = _AnonPeak()
        wall, cpu, wrote = time.perf_counter(), time.process_time(), _write_bytes()

        class Count:  # a progress sink without a total: no counting pass
            uploaded = 0

            def update(self, n: int = 1, nbytes: int = 0) -> None:
                self.uploaded += n

        count = Count()

        def figures(stopped: bool) -> dict:
            spent = time.process_time() - cpu
            return {
                **out,
                "stopped": stopped,
                "files_done": count.uploaded,
                "flush_wall_s": round(time.perf_counter() - wall, 1),
                "flush_cpu_s": round(spent, 1),
                "cpu_us_per_file": round(1e6 * spent / max(1, count.uploaded), 1),  # per file done
                "peak_rss_mib": _status_mib("VmHWM"),
                "peak_rss_anon_mib": anon.stop(),
                "flush_write_bytes_per_file": round((_write_bytes() - wrote) / files),
            } | ({"tracemalloc_peak_mib": _traced_peak()} if trace else {})

        if seconds:

            def stop() -> None:  # the rest of the flush is not waited for
                print(json.dumps(figures(True)), flush=True)
                os._exit(0)

            timer = threading.Timer(seconds, stop)
            timer.daemon = True
            timer.start()
        report = ws.flush(progress=count)
        result = figures(False) | {"uploaded": report.uploaded, "still_dirty": report.still_dirty}
        ws.close()
    return result


def unlink_all(home: str, files: int) -> dict:
    """Every file of the prepared workspace unlinked (``--gc``'s workspace): its records deleted
    and their chunks listed as garbage, as unlinks do (``records.delete_file``), 10,000 files a
    transaction, then left as a crash leaves it, before any collection ran."""
    import itertools

    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace, records

    wall, cpu = time.perf_counter(), time.process_time()
    with StoreRegistry(_config(home)) as stores:
        ws = open_workspace("ws", _config(home), stores, background=False)
        after = None
        while True:
            with ws.journal.write("benchmark: unlink every file") as txn:
                scan = txn.tree_files_after(after)
                batch = list(itertools.islice(scan, 10_000))
                scan.close()
                for path, file_id in batch:
                    rec = txn.file(file_id)
                    if rec is not None:
                        records.delete_file(txn, file_id, rec)
                    txn.del_entry(path)
            if not batch:
                break
            after = batch[-1][0]
        with ws.journal.read() as txn:
            listed = len(txn.garbage())
        ws.abandon()
    return {
        "files": files,
        "garbage_listed": listed,
        "unlink_wall_s": round(time.perf_counter() - wall, 1),
        "unlink_cpu_s": round(time.process_time() - cpu, 1),
    }


def collect(home: str, files: int) -> dict:
    """Open the workspace of ``unlink_all`` and measure the collection its recovery runs (the
    first ``Flusher.gc``: the garbage list of N chunks): CPU per key, the sampled peak of
    ``RssAnon`` during it and ``VmHWM``; and the open's own figures around it."""
    import datahub
    from datahub.storage import StoreRegistry
    from datahub.writeback import flusher as flusher_mod
    from datahub.writeback import open_workspace

    config = _config(home)
    out: dict = {"datahub": os.path.dirname(datahub.__file__), "files": files}
    real_gc = flusher_mod.Flusher.gc

    def gc(flusher) -> int:
        if "gc_cpu_s" in out:
            return real_gc(flusher)
        out["rss_anon_before_gc_mib"] = _status_mib("RssAnon")
        _reset_peak()
        anon = _AnonPeak()
        wall, cpu = time.perf_counter(), time.process_time()
        deleted = real_gc(flusher)
        spent = time.process_time() - cpu
        out["gc_wall_s"] = round(time.perf_counter() - wall, 1)
        out["gc_cpu_s"] = round(spent, 1)
        out["gc_deleted"] = deleted
        out["gc_cpu_us_per_key"] = round(1e6 * spent / max(1, deleted), 1)
        out["gc_peak_rss_mib"] = _status_mib("VmHWM")
        out["gc_peak_rss_anon_mib"] = anon.stop()
        return deleted

    flusher_mod.Flusher.gc = gc
    try:
        with StoreRegistry(config) as stores:
            out["rss_anon_imported_mib"] = _status_mib("RssAnon")
            anon = _AnonPeak()
            wall, cpu = time.perf_counter(), time.process_time()
            ws = open_workspace("ws", config, stores, background=False)
            out["open_wall_s"] = round(time.perf_counter() - wall, 1)
            out["open_cpu_s"] = round(time.process_time() - cpu, 1)
            out["open_peak_rss_anon_mib"] = max(anon.stop(), out.get("gc_peak_rss_anon_mib", 0))
            out["rss_anon_after_open_mib"] = _status_mib("RssAnon")
            with ws.journal.read() as txn:
                out["garbage_left"] = len(txn.garbage())
            ws.abandon()
    finally:
        flusher_mod.Flusher.gc = real_gc  # a test runs this in its own process
    return out


def _device_bytes(device: str) -> int:
    """Bytes written to block device ``device`` (``/sys/block/<device>/stat``, sectors of 512),
    once everything dirty is on it (``sync``)."""
    os.sync()
    return int(Path(f"/sys/block/{device}/stat").read_text().split()[6]) * 512


def _traced_peak() -> float:
    import tracemalloc

    return round(tracemalloc.get_traced_memory()[1] / 2**20, 1)


def disk(home: str, files: int, device: str | None) -> dict:
    """Build and flush N files in one process: per file and phase, the ``write_bytes`` the
    kernel charged the process and, with ``device``, the bytes that reached that device."""
    import datahub
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    out: dict = {"datahub": os.path.dirname(datahub.__file__), "files": files}
    last = _write_bytes()
    last_device = _device_bytes(device) if device else 0

    def phase(name: str) -> None:
        nonlocal last, last_device
        now = _write_bytes()
        out[f"{name}_write_bytes_per_file"] = round((now - last) / files)
        last = now
        if device:
            now = _device_bytes(device)
            out[f"{name}_device_bytes_per_file"] = round((now - last_device) / files)
            last_device = now

    with StoreRegistry(_config(home)) as stores:
        ws = open_workspace("ws", _config(home), stores, background=False)
        phase("open")
        _write(ws, files)
        phase("writes")
        report = ws.flush()
        phase("flush")
        ws.close()
        phase("close")
    out["uploaded"] = report.uploaded
    out["journal_file_bytes_per_file"] = round(
        sum(p.stat().st_size for p in Path(home).rglob("data.mdb")) / files
    )
    return out


def folio_probe(directory: str, device: str | None) -> dict:
    """What one small write after an ``fdatasync`` is charged (``write_bytes``) and what reaches
    the device, in a file first written whole (1 MiB in one write, as a pack or the journal's
    file grows): the reason ``write_bytes`` is not a disk count on this kernel."""
    path = Path(directory) / "flushmem19-folio-probe"
    out = {}
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.pwrite(fd, bytes(1 << 20), 0)
        os.fdatasync(fd)
        for size in (100, PAGE):
            wrote, reached = _write_bytes(), _device_bytes(device) if device else 0
            for i in range(200):
                os.pwrite(fd, b"x" * size, i * size)
                os.fdatasync(fd)
            out[f"{size}_byte_write_charged"] = round((_write_bytes() - wrote) / 200)
            if device:
                out[f"{size}_byte_write_reached_device"] = round((_device_bytes(device) - reached) / 200)
    finally:
        os.close(fd)
        path.unlink()
    return out


_CALL = re.compile(r"^(?:\d+\s+)?(\w+)\((\d+)<([^>]*)>(.*)\)\s+=\s+(-?\d+)")


def _component(path: str) -> str:
    if path.endswith("/data.mdb") or path.endswith("/lock.mdb"):
        return "journal (LMDB)"
    if "/packs/" in path:
        return "packs"
    if "/writeback/" in path:
        return "chunk files"
    if "/workspaces/" in path or "/objects" in path:
        return "flush target"
    return "other"


def strace_summary(trace: Path, files: int) -> dict:
    """Bytes written, pages dirtied and flush calls per component, per file (module docstring).

    ``trace`` is the prefix of ``strace -ff``'s files, one per thread, so no call is split."""
    written, pages, syncs = Counter(), Counter(), Counter()
    lines = (
        line
        for part in trace.parent.glob(f"{trace.name}.*")
        for line in part.read_text(errors="replace").splitlines()
    )
    for line in lines:
        m = _CALL.match(line)
        if not m:
            continue
        call, _fd, path, rest, ret = m.groups()
        n = int(ret)
        part = _component(path)
        if call in ("fsync", "fdatasync", "sync_file_range", "msync"):
            syncs[part] += 1
            continue
        if n <= 0:
            continue
        written[part] += n
        offset = None
        if call in ("pwrite64", "pwritev", "pwritev2"):
            tail = rest.rsplit(",", 2 if call == "pwritev2" else 1)
            try:
                offset = int(tail[1].strip())
            except (IndexError, ValueError):
                offset = None
        if offset is None:
            pages[part] += (n + PAGE - 1) // PAGE
        else:
            pages[part] += (offset + n - 1) // PAGE - offset // PAGE + 1
    parts = sorted(set(written) | set(syncs))
    return {
        part: {
            "bytes_per_file": round(written[part] / files, 1),
            "pages_per_file": round(pages[part] / files, 2),
            "page_bytes_per_file": round(pages[part] * PAGE / files),
            "flushes_per_file": round(syncs[part] / files, 2),
        }
        for part in parts
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--files", type=int, nargs="+", default=[100_000])
    ap.add_argument("--scratch", default=harness.SCRATCH)
    ap.add_argument("--disk", action="store_true", help="disk bytes per file of a build and its flush")
    ap.add_argument("--strace", action="store_true", help="with --disk: the bytes by component")
    ap.add_argument("--flush-seconds", type=float, default=None)
    ap.add_argument("--tracemalloc", action="store_true", help="the flush's Python heap peak too (slower)")
    ap.add_argument("--reuse", action="store_true", help="a workspace built by an earlier run, if there")
    ap.add_argument("--gc", action="store_true", help="the collection of N unlinked files' garbage")
    ap.add_argument("--prepare", metavar="HOME")
    ap.add_argument("--unlink-all", metavar="HOME")
    ap.add_argument("--collect", metavar="HOME")
    ap.add_argument("--flush", metavar="HOME")
    ap.add_argument("--disk-home", metavar="HOME")
    ap.add_argument(
        "--folio-probe", action="store_true", help="what a 100-byte write is charged, in --scratch"
    )
    ap.add_argument("--device", help="with --disk: the block device under --scratch (e.g. loop0) to count")
    args = ap.parse_args(argv)
    if args.folio_probe:
        print(json.dumps(folio_probe(args.scratch, args.device)), flush=True)
        return
    if args.prepare:
        print(json.dumps(prepare(args.prepare, args.files[0])), flush=True)
        return
    if args.unlink_all:
        print(json.dumps(unlink_all(args.unlink_all, args.files[0])), flush=True)
        return
    if args.collect:
        print(json.dumps(collect(args.collect, args.files[0])), flush=True)
        return
    if args.flush:
        print(json.dumps(flush(args.flush, args.files[0], args.flush_seconds, args.tracemalloc)), flush=True)
        return
    if args.disk_home:
        print(json.dumps(disk(args.disk_home, args.files[0], args.device)), flush=True)
        return
    trees = harness.trees_of(args.base_tree)
    builder = trees.get("base", harness.HEAD)
    this = Path(__file__).resolve()
    for k, n in enumerate(args.files):
        home = harness.home_of(args.scratch, n)
        if args.disk:
            for name in harness.order(trees, k):
                shutil.rmtree(home, ignore_errors=True)
                trace = Path(args.scratch) / f"workspace-strace-{name}-{n}.txt" if args.strace else None
                print(f"{n} files, build and flush on {name}: {_load()}", flush=True)
                extra = ["--device", args.device] if args.device else []
                result = harness.child(
                    this, trees[name], "--disk-home", str(home), "--files", str(n), *extra, strace=trace
                )
                print(f"  {json.dumps(result)}", flush=True)
                if trace is not None:
                    print(f"  by component: {json.dumps(strace_summary(trace, n))}", flush=True)
                    for part in trace.parent.glob(f"{trace.name}.*"):
                        part.unlink()
            shutil.rmtree(home, ignore_errors=True)
            continue
        if args.gc:
            pristine = harness.built(
                args.scratch, n, builder, args.reuse, "unlinked",
                lambda home, n=n: harness.child(this, builder, "--unlink-all", str(home), "--files", str(n)),
            )  # fmt: skip
        else:
            pristine = harness.built(args.scratch, n, builder, args.reuse)
        for name, tree in harness.each_side(trees, k, pristine, home):
            if args.gc:
                print(f"{n} files unlinked, open and collect on {name}: {_load()}", flush=True)
                result = harness.child(this, tree, "--collect", str(home), "--files", str(n))
            else:
                print(f"{n} files, flush on {name}: {_load()}", flush=True)
                extra = ["--flush-seconds", str(args.flush_seconds)] if args.flush_seconds else []
                extra += ["--tracemalloc"] if args.tracemalloc else []
                result = harness.child(this, tree, "--flush", str(home), "--files", str(n), *extra)
            print(f"  {json.dumps(result)}", flush=True)
        print(f"  after: {_load()}", flush=True)
        if not args.reuse:
            shutil.rmtree(pristine, ignore_errors=True)


if __name__ == "__main__":
    main()
