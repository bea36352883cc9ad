"""A writer rewriting a file it keeps open, a flusher looping beside it, and commits: what the
flushes and commits cost, two source trees taking turns in one run.

    .venv/bin/python bench/writeback/gc_rewriter.py BASE_TREE [--rounds 4] [--seconds 8]

gclock15. ``BASE_TREE`` is another checkout of the repository (``git archive BASE | tar -x -C
/var/tmp/base``); this tree is "head". Each round runs one child process per tree (its
``datahub`` imported from that tree: checked), alternating which goes first. A
child opens a workspace on a local shared tier (4 KiB chunks, flush interval an hour) and,
for ``--seconds``: one thread rewrites a 3-chunk file through one open handle and fsyncs each
generation with no pause (each fsync leaves the old chunks as garbage), one thread flushes in
a loop, and the main thread commits the workspace to a SQLite catalog again and again
(``commit_workspace``; a Conflict or ObjectChanged is an attempt that failed). Printed per
child: generations fsynced; flushes of the loop and that thread's CPU milliseconds per flush;
the longest garbage list a collection read (the journal's list: every collection reads it
whole); commit attempts, commits made (``versions``: how many made a new version; the others
found the head already holding the file as flushed), and the committing thread's CPU per
commit made.
Counts and CPU per unit are the figures to compare; the machine is shared, so wall-clock
rates swing with the load (printed before and after each round).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
CHUNK = 4096
SIZE = 3 * CHUNK + 123


def _child(seconds: float) -> dict:
    """One measurement, with this process's ``datahub`` (the tree on PYTHONPATH)."""
    import datahub
    from datahub.catalog import open_catalog
    from datahub.config import load_config
    from datahub.errors import Conflict, ObjectChanged
    from datahub.storage import StoreRegistry
    from datahub.workspaces import commit_workspace
    from datahub.writeback import open_workspace
    from datahub.writeback.journal import Txn

    longest = [0]
    garbage = Txn.garbage

    def read_garbage(self: Txn) -> list[str]:
        keys = garbage(self)
        longest[0] = max(longest[0], len(keys))
        return keys

    Txn.garbage = read_garbage  # counts what each collection reads; the work is the tree's own
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        overrides = {"home": f"{tmp}/var", "cache": {"page_size": CHUNK, "flush_interval": 3600}}
        config = load_config(env={}, overrides=overrides)
        stores = StoreRegistry(config)
        catalog = open_catalog(f"sqlite:///{tmp}/catalog.db")
        ws = open_workspace("ws", config, stores)
        stop = threading.Event()
        counts = {"generations": 0, "flushes": 0, "flush_cpu": 0.0}

        def rewrite() -> None:
            with ws.open("f", create=True) as fh:
                n = 0
                while not stop.is_set():
                    n += 1
                    fh.write(0, (n.to_bytes(8, "little") * (SIZE // 8 + 1))[:SIZE])
                    fh.fsync()
                    counts["generations"] = n

        def flush() -> None:
            cpu = time.thread_time()
            while not stop.is_set():
                ws.flush()
                counts["flushes"] += 1
            counts["flush_cpu"] = time.thread_time() - cpu

        threads = [threading.Thread(target=rewrite), threading.Thread(target=flush)]
        for t in threads:
            t.start()
        attempts = made = 0
        versions = set()
        cpu = time.thread_time()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            attempts += 1
            try:
                version = commit_workspace(ws, catalog, "bench")
                versions.add(version.seq if version is not None else 0)
                made += 1
            except (Conflict, ObjectChanged):
                pass
        commit_cpu = time.thread_time() - cpu
        stop.set()
        for t in threads:
            t.join()
        ws.close()
        catalog.close()
        stores.close()
    return {
        "datahub": os.path.dirname(datahub.__file__),
        "generations": counts["generations"],
        "flushes": counts["flushes"],
        "flush_cpu_ms": round(1000 * counts["flush_cpu"] / max(1, counts["flushes"]), 3),
        "longest_garbage_list": longest[0],
        "commit_attempts": attempts,
        "commits": made,
        "versions": len(versions),
        "commit_cpu_ms": round(1000 * commit_cpu / made, 1) if made else None,
    }


def _run(tree: Path, seconds: float) -> dict:
    return run_child(Path(__file__), tree, str(seconds))


def run_child(script: Path, tree: Path, arg: str) -> dict:
    """``script --child arg`` run with ``tree``'s datahub (checked, not assumed): the JSON
    object its last line prints (also for other benchmarks' A/B of two trees)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-P", str(script.resolve()), "--child", arg]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if Path(result["datahub"]) != tree / "datahub":  # checked, not assumed
        raise SystemExit(f"the child in {tree} imported datahub from {result['datahub']}")
    result["datahub"] = "its own tree"  # (no absolute path in a recorded output)
    return result


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(_child(args.child)))
        return
    trees = {"base": Path(args.base_tree).resolve(), "head": HEAD}
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
        print(f"round {r + 1}: {_load()}")
        for name in order:
            result = _run(trees[name], args.seconds)
            results[name].append(result)
            print(f"  {name}: {json.dumps(result)}")
        print(f"  after: {_load()}")
    for name, rows in results.items():
        made = [row["commits"] for row in rows]
        print(
            f"{name}: median flushes {statistics.median(row['flushes'] for row in rows)}, "
            f"CPU ms per flush {statistics.median(row['flush_cpu_ms'] for row in rows)}, "
            f"longest garbage list {statistics.median(row['longest_garbage_list'] for row in rows)}, "
            f"commits {statistics.median(made)} of "
            f"{statistics.median(row['commit_attempts'] for row in rows)} attempts"
        )


if __name__ == "__main__":
    main()
