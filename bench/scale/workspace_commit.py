"""A workspace commit of N files: wall, CPU and peak RSS per file, against another tree, same run.

    .venv/bin/python bench/scale/workspace_commit.py BASE_TREE [--files 100000] [--scratch /var/tmp]

commitmem18, issue 38 (a workspace of 10^6 outputs is ordinary; peak RSS of any catalog
operation <= 400 MB). ``BASE_TREE`` is another checkout (``git archive BASE | tar -x -C DIR``);
this tree is "head". For each N, one workspace per side is built through the ``Workspace``
API (N small files of distinct contents, 1,000 to a directory, written by 8 threads, then
flushed to a local objects store), each by a process of its own: a commit's objects carry
their etag, which on a local store names the file's inode and ctime, so a built workspace
cannot be copied, and each side gets its own. Then, sides alternating, one process per side
opens its workspace and

- commits it into a new SQLite dataset (the first commit: every file pinned as a blob);
- in another process, rewrites 1 % of the files (every 100th), flushes, and commits again
  (the second commit).

For each commit: wall and process CPU seconds, CPU microseconds per file, and the peak RSS of
the process during the commit (``VmHWM`` after resetting it with ``/proc/self/clear_refs``
just before: the commit's own peak, the interpreter and its imports included, and the pages
of the journal's LMDB file it maps), the peak of its anonymous part (``RssAnon``, sampled
every 10 ms: the heap), and the RSS before the commit; with
``--tracemalloc`` also the Python heap's peak (a pass of its own: tracing slows CPU).
``--build-only HOME --files N`` and ``--commit HOME`` run one step on its own (for runs too
long to wait for). Wall swings with the shared machine's load (printed): CPU is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
PER_DIR = 1000
WRITERS = 8  # threads writing the files: their closes share the journal's group commits


def _config(home: str):
    from datahub.config import load_config

    return load_config(env={}, overrides={"home": home, "cache": {"flush_interval": 3600}})


def _content(i: int, generation: int = 0) -> bytes:
    return f"output {i} of a workspace commit benchmark, generation {generation}\n".encode()


def _path(i: int) -> str:
    return f"d{i // PER_DIR:05d}/f{i:08d}.txt"


def build(home: str, files: int) -> dict:
    """A flushed workspace ``ws`` of ``files`` files under ``home``."""
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    wall, cpu = time.perf_counter(), time.process_time()
    with StoreRegistry(_config(home)) as stores:
        ws = open_workspace("ws", _config(home), stores, background=False)
        for d in range((files + PER_DIR - 1) // PER_DIR):
            ws.mkdir(f"d{d:05d}")

        def write(first: int) -> None:
            for i in range(first, files, WRITERS):
                with ws.open(_path(i), create=True) as fh:
                    fh.write(0, _content(i))

        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(write, range(WRITERS)))
        ws.flush()
        ws.close()
    return {
        "files": files,
        "build_wall_s": round(time.perf_counter() - wall, 1),
        "build_cpu_s": round(time.process_time() - cpu, 1),
    }


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no {field} in /proc/self/status")


class _AnonPeak:
    """The highest ``RssAnon`` seen, sampled every 10 ms by a thread: the heap's share of the
    peak (``VmHWM`` also counts the file pages mapped, the journal's LMDB file among them,
    which the kernel can drop; it keeps no peak of the anonymous part alone)."""

    def __init__(self) -> None:
        import threading

        self.peak = _status_mib("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _status_mib("RssAnon"))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max(self.peak, _status_mib("RssAnon"))


def _measured(fn, files: int, trace: bool) -> dict:
    import tracemalloc

    if trace:
        tracemalloc.start()
    before = _status_mib("VmRSS")
    _reset_peak()
    anon = _AnonPeak()
    wall, cpu = time.perf_counter(), time.process_time()
    version = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "cpu_us_per_file": round(1e6 * cpu / files, 1),
        "rss_before_mib": before,
        "peak_rss_mib": _status_mib("VmHWM"),
        "peak_rss_anon_mib": anon.stop(),
        "version": [version.seq, version.added, version.removed, version.modified],
    }
    if trace:
        out["tracemalloc_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
    return out


def commit(home: str, step: str, trace: bool = False) -> dict:
    """One commit of the built workspace under ``home``, in a process of its own (so one
    commit's freed heap is not the next one's start): ``first``, or ``second`` after a 1 %
    change (every 100th file rewritten and flushed)."""
    import datahub
    from datahub.catalog import open_catalog
    from datahub.storage import StoreRegistry
    from datahub.workspaces import commit_workspace
    from datahub.writeback import open_workspace

    config = _config(home)
    with StoreRegistry(config) as stores:
        ws = open_workspace("ws", config, stores, background=False)
        catalog = open_catalog(f"sqlite:///{home}/bench-catalog.db")
        try:
            with ws.journal.read() as txn:  # counted, not listed: no list of N objects before the peak
                files = sum(1 for _ in txn.tree_files())
            if step == "second":
                for i in range(0, files, 100):
                    with ws.open(_path(i), truncate=True) as fh:
                        fh.write(0, _content(i, 1))
                ws.flush()
            result = _measured(lambda: commit_workspace(ws, catalog, "outputs"), files, trace)
        finally:
            catalog.close()
            ws.close()
    return {"datahub": os.path.dirname(datahub.__file__), "files": files, step: result}


def _run(tree: Path, *args: str, script: str = __file__) -> dict:
    """``script`` run with ``tree``'s ``datahub`` (checked): the JSON object its last line prints."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-P", str(Path(script).resolve()), *args]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if "datahub" in result:
        if Path(result["datahub"]) != tree / "datahub":  # checked, not assumed
            raise SystemExit(f"the child in {tree} imported datahub from {result['datahub']}")
        result["datahub"] = "its own tree"  # (no absolute path in a recorded output)
    return result


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--files", type=int, nargs="+", default=[100_000])
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--build-only", metavar="HOME")
    ap.add_argument("--commit", metavar="HOME")
    ap.add_argument("--step", choices=["first", "second"], default="first")
    args = ap.parse_args(argv)
    if args.build_only:
        print(json.dumps(build(args.build_only, args.files[0])), flush=True)
        return
    if args.commit:
        print(json.dumps(commit(args.commit, args.step, args.tracemalloc)), flush=True)
        return
    trees = {"head": HEAD} | ({"base": Path(args.base_tree).resolve()} if args.base_tree else {})
    for k, n in enumerate(args.files):
        homes = {name: Path(args.scratch) / f"commitmem18-bench-{name}-{n}" for name in trees}
        for name, home in homes.items():
            shutil.rmtree(home, ignore_errors=True)
            print(f"{n} files, build for {name}: {_load()}", flush=True)
            print(f"  {json.dumps(_run(HEAD, '--build-only', str(home), '--files', str(n)))}", flush=True)
        order = list(trees) if k % 2 == 0 else list(reversed(trees))
        for name in order:
            print(f"{n} files, commits on {name}: {_load()}", flush=True)
            extra = ["--tracemalloc"] if args.tracemalloc else []
            for step in ("first", "second"):
                result = _run(trees[name], "--commit", str(homes[name]), "--step", step, *extra)
                print(f"  {json.dumps(result)}", flush=True)
        print(f"  after: {_load()}", flush=True)
        for home in homes.values():
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
