"""CPU per ``LocalStore.read`` of a small file (a cold file's origin read from a local
directory), against the same-run baseline of the buffered file object it replaced.

    .venv/bin/python bench/storage/local_read.py [--files 2000] [--rounds 5]

``--files`` files of 50-200 KB in a temp directory, read whole with their etag checked,
page cache warm (this measures the read's own CPU, not the disk). Per round, the two
contenders alternate (so load bursts hit both alike): the baseline (``open(path, "rb")``,
the etag from ``fstat``, ``seek``, ``read()``: the code before) and
``LocalStore.read`` (one descriptor, ``fstat``, ``pread``). Printed: ``process_time`` per
read, median over rounds, and the system calls per read (counted by ``strace -c -f`` once
if strace is installed).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from datahub.storage import LocalStore  # noqa: E402
from datahub.storage.local import _current_etag  # noqa: E402


def baseline_read(store: LocalStore, key: str, etag: str) -> bytes:
    """The read before: a buffered file object."""
    with open(store.root / key, "rb") as fh:
        if _current_etag(fh.fileno(), os.fstat(fh.fileno()), etag) != etag:
            raise AssertionError("etag changed")
        fh.seek(0)
        return fh.read()


def lean_read(store: LocalStore, key: str, etag: str) -> bytes:
    return store.read(key, etag=etag)


CONTENDERS = {"buffered file (before)": baseline_read, "LocalStore.read": lean_read}


def run(store: LocalStore, items: list[tuple[str, str]], fn) -> float:
    t0 = time.process_time()
    for key, etag in items:
        fn(store, key, etag)
    return (time.process_time() - t0) / len(items)


def syscalls(root: Path, name: str, n: int) -> str:
    """System calls per read of one contender, by strace in a child process."""
    if shutil.which("strace") is None:
        return "-"
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); sys.path.insert(0, {str(REPO / 'bench' / 'storage')!r})\n"
        "from local_read import *\n"
        f"store = LocalStore({str(root)!r}); items = [(i.key, i.etag) for i in store.list()][:{n}]\n"
        "import os; os.write(2, b'MARK\\n')\n"
        f"run(store, items, CONTENDERS[{name!r}])\n"
    )
    out = subprocess.run(
        ["strace", "-f", "-e", "trace=!write", sys.executable, "-c", code], capture_output=True, text=True
    ).stderr
    calls = out.split("MARK", 1)[-1].splitlines()
    return f"{sum(1 for c in calls if '(' in c and not c.startswith('+++')) / n:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="local-read-"))
    try:
        store = LocalStore(tmp)
        rng = random.Random(25)
        items = []
        for i in range(args.files):
            info = store.put(f"c{i % 20:02d}/img_{i:06d}.jpg", rng.randbytes(rng.randint(50_000, 200_000)))
            items.append((info.key, info.etag))
        for key, etag in items:  # page cache warm, both contenders read the same bytes
            assert baseline_read(store, key, etag) == lean_read(store, key, etag)
        results: dict[str, list[float]] = {name: [] for name in CONTENDERS}
        for _ in range(args.rounds):
            for name, fn in CONTENDERS.items():
                results[name].append(run(store, items, fn))
        print(f"# local_read: {args.files} files of 50-200 KB, {args.rounds} rounds, page cache warm")
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  load {os.getloadavg()[0]:.2f}")
        print(f"{'contender':24} {'CPU us/read (median)':>21} {'min':>7} {'syscalls/read':>14}")
        for name, values in results.items():
            calls = syscalls(tmp, name, 200)
            print(f"{name:24} {statistics.median(values) * 1e6:>21.1f} {min(values) * 1e6:>7.1f} {calls:>14}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
