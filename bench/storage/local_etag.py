"""CPU of LocalStore's put, stat and list with the ctime etag, against the same run's baseline:
the LocalStore of another commit (default cec0912: md5 + xattr on put, getxattr per stat).

    .venv/bin/python bench/storage/local_etag.py [--base cec0912] [--rounds 5] [--files 5000]
        [--puts 200] [--dir /var/tmp/...]

The base commit's ``datahub/storage/local.py`` (``git show``) is loaded as a module of its
own beside this tree's, both on the same errors and keys modules. Per round the two
contenders alternate, each in the other order the next round (so load bursts hit both):

- ``put 1 MiB``: ``--puts`` puts of 1 MiB of bytes (ms of CPU per MiB: write, fsync, rename);
- ``put 4 KiB``: ``--puts`` puts of 4 KiB (ms of CPU per put);
- ``stat``: one ``stat`` of each of ``--files`` files written by another program (µs per file);
- ``list``: a listing of the same files (µs per file);
- ``read``: a whole read of each of those files under its etag (µs per read: this tree
  checks a ctime etag once more after its ``pread``).

Printed: ``time.process_time`` per unit, the median over rounds and its ratio, and the load
average before and after. CPU is the figure to compare on a loaded machine, not wall time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from datahub.storage.local import LocalStore  # noqa: E402


def base_store_class(commit: str, scratch: Path) -> type:
    """``LocalStore`` as ``commit`` had it, loaded from ``git show`` into a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:datahub/storage/local.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = scratch / f"local_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"base_local_{commit}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LocalStore


def cpu(fn: Callable[[], object], units: int) -> float:
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) / units


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="cec0912")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--puts", type=int, default=200)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="local-etag-", dir=args.dir))
    try:
        contenders = {f"base {args.base}": base_store_class(args.base, scratch), "this tree": LocalStore}
        foreign = scratch / "foreign"
        for i in range(args.files):
            sub = foreign / f"d{i % 50:02d}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"f{i:06d}.bin").write_bytes(b"z" * 1000)
        keys = [f"d{i % 50:02d}/f{i:06d}.bin" for i in range(args.files)]
        mib, small = os.urandom(1024 * 1024), os.urandom(4096)
        print(f"kernel {os.uname().release}; {args.rounds} rounds; {load()}")
        results: dict[tuple[str, str], list[float]] = {}
        names = list(contenders)
        for rnd in range(args.rounds):
            for name in names if rnd % 2 == 0 else names[::-1]:
                cls = contenders[name]
                out = scratch / "puts" / name.replace(" ", "_")
                shutil.rmtree(out, ignore_errors=True)
                store, reader = cls(out), cls(foreign)

                def put_big(store=store) -> None:
                    for i in range(args.puts):
                        store.put(f"big/{i}", mib)

                def put_small(store=store) -> None:
                    for i in range(args.puts):
                        store.put(f"small/{i}", small)

                def stat_all(reader=reader) -> None:
                    for key in keys:
                        reader.stat(key)

                def list_all(reader=reader) -> None:
                    for _ in reader.list():
                        pass

                etags = [(info.key, info.etag) for info in reader.list()]

                def read_all(reader=reader, etags=etags) -> None:
                    for key, etag in etags:
                        reader.read(key, etag=etag)

                results.setdefault((name, "put 1 MiB (ms/MiB)"), []).append(1e3 * cpu(put_big, args.puts))
                results.setdefault((name, "put 4 KiB (ms/put)"), []).append(1e3 * cpu(put_small, args.puts))
                results.setdefault((name, "stat (us/file)"), []).append(1e6 * cpu(stat_all, len(keys)))
                results.setdefault((name, "list (us/file)"), []).append(1e6 * cpu(list_all, len(keys)))
                results.setdefault((name, "read (us/read)"), []).append(1e6 * cpu(read_all, len(keys)))
        print(load())
        for what in dict.fromkeys(w for _, w in results):
            medians = {name: statistics.median(results[(name, what)]) for name in names}
            runs = "; ".join(
                f"{name}: median {medians[name]:.3f} ("
                + " ".join(f"{x:.3f}" for x in results[(name, what)])
                + ")"
                for name in names
            )
            print(f"{what}: {runs}; this/base {medians[names[1]] / medians[names[0]]:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
