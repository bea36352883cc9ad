"""A workspace's open (its recovery) over N acknowledged files: peak RSS and CPU, this tree against another, same run.

    .venv/bin/python bench/scale/workspace_open.py BASE_TREE [--files 100000 1000000] [--scratch /var/tmp] [--reuse]

recover19, issues 38/41. Opening a workspace runs ``_recover`` (``datahub/writeback``), which
held a decoded record per file and a dict of every path per file id: 2.2 GiB of RSS to open
10^6 files (flushmem19). For each N one workspace is built once by the base tree's writers
(``workspace_flush.prepare``: N files of ~70 bytes, 1,000 to a directory, left as a crash
leaves them, nothing flushed) and copied aside (``--reuse``: kept for the next run). Each
side, in turn (the order alternating between sizes), gets a fresh copy at the same path (the
journal names its shared tier and target by path) and, in a process of its own with its own
``datahub``, imports, then opens it (``background=False``) and asks ``dirty(limit=1)`` (a
tree before recover19: ``dirty()``, the whole list) whether anything is dirty, as
``open_workspace`` does in the background. Printed: RSS after the
imports, ``VmHWM`` (the journal's mapped pages count there too) and the sampled peak of
``RssAnon`` (the heap) during the open, ``RssAnon`` after it (what the open still holds), the
open's wall, CPU and CPU microseconds per file, and the same for the ``dirty()`` call.

Wall swings with the shared machine's load (printed); CPU and RSS are the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
try:
    from bench.scale.workspace_commit import _AnonPeak, _config, _load, _reset_peak, _status_mib
except ImportError:  # a child on the base tree run from this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from workspace_commit import _AnonPeak, _config, _load, _reset_peak, _status_mib


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
        ws.abandon()
    return out


def _child(tree: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-P", str(Path(__file__).resolve()), *args]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "datahub" in result:
        if Path(result["datahub"]) != tree / "datahub":
            raise SystemExit(f"the child in {tree} imported datahub from {result['datahub']}")
        result["datahub"] = "its own tree"
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--files", type=int, nargs="+", default=[100_000])
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--reuse", action="store_true", help="a workspace built by an earlier run, if there")
    ap.add_argument("--open", metavar="HOME")
    args = ap.parse_args(argv)
    if args.open:
        print(json.dumps(measure_open(args.open, args.files[0])), flush=True)
        return
    flush_bench = str(Path(__file__).resolve().with_name("workspace_flush.py"))
    trees = {"head": HEAD} | ({"base": Path(args.base_tree).resolve()} if args.base_tree else {})
    builder = trees.get("base", HEAD)
    for k, n in enumerate(args.files):
        order = list(trees) if k % 2 == 0 else list(reversed(trees))
        home = Path(args.scratch) / f"recover19-bench-{n}"
        pristine = Path(args.scratch) / f"recover19-bench-{n}-built"
        shutil.rmtree(home, ignore_errors=True)
        if args.reuse and pristine.is_dir():
            print(f"{n} files, built before (--reuse): {json.loads((pristine / 'built.json').read_text())}")
        else:
            shutil.rmtree(pristine, ignore_errors=True)
            print(f"{n} files, build (base tree's writers): {_load()}", flush=True)
            env = {**os.environ, "PYTHONPATH": str(builder)}
            cmd = [sys.executable, "-P", flush_bench, "--prepare", str(home), "--files", str(n)]
            done = subprocess.run(cmd, env=env, cwd=builder, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{cmd} failed:\n{done.stderr[-3000:]}")
            built = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"  {json.dumps(built)}", flush=True)
            (home / "built.json").write_text(json.dumps(built))
            os.rename(home, pristine)
        for name in order:
            shutil.copytree(pristine, home, symlinks=True)
            print(f"{n} files, open on {name}: {_load()}", flush=True)
            print(f"  {json.dumps(_child(trees[name], '--open', str(home), '--files', str(n)))}", flush=True)
            shutil.rmtree(home, ignore_errors=True)
        print(f"  after: {_load()}", flush=True)
        if not args.reuse:
            shutil.rmtree(pristine, ignore_errors=True)


if __name__ == "__main__":
    main()
