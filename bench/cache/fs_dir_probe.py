"""What ``datahub://`` pays per file for following the mount's rule (a key that is also a
directory is the directory): ``open``/``cat_file`` of a file asks the catalog whether any key
lies under it. Same run, same warm cache, alternating rounds: ``cat_file`` as it is now
against the same read without the probe (``_record(files_only=False)``, what ``cat_file`` did
before fsdirs18), and ``open().read()`` likewise.

    .venv/bin/python bench/cache/fs_dir_probe.py [--files 2000] [--size 4096] [--rounds 5]

Prints per-file wall and CPU (process time) medians over the rounds, and the load."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from datahub.catalog import Put, Record, open_catalog
from datahub.config import load_config
from datahub.fs import DatahubFileSystem
from datahub.storage import StoreRegistry


def _setup(home: str, files: int, size: int):
    config = load_config(env={}, overrides={"home": home})
    with StoreRegistry(config) as stores:
        objects = stores.store(config.resolved_objects_url)
        puts = []
        for i in range(files):
            key = f"d{i % 20:02d}/{i:06d}.bin"
            info = objects.put(f"o/{i:06d}", os.urandom(size))
            puts.append(Put(Record(key, objects.url_for(info.key), info.etag, info.size)))
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("ds")
    catalog.commit("ds", puts)
    catalog.close()
    return config, [f"ds@1/{p.record.key}" for p in puts]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fsdirs18-bench-") as home:
        config, paths = _setup(home, args.files, args.size)
        fs = DatahubFileSystem(config)
        try:
            for p in paths:  # warm: every page in the RAM tier
                fs.cat_file(p)

            def cat_now() -> None:
                for p in paths:
                    fs.cat_file(p)

            def cat_unprobed() -> None:
                for p in paths:
                    record, _ = fs._record(p, files_only=False)
                    fs.cache.read(record.ref, 0, record.size)

            def open_now() -> None:
                for p in paths:
                    with fs.open(p) as f:
                        f.read()

            def open_unprobed() -> None:
                from datahub.fs import DatahubFile

                for p in paths:
                    record, full = fs._record(p, files_only=False)
                    with DatahubFile(fs, full, record.ref, block_size=config.cache.page_size) as f:
                        f.read()

            cases = {
                "cat_file, probed (now)": cat_now,
                "cat_file, unprobed (before)": cat_unprobed,
                "open+read, probed (now)": open_now,
                "open+read, unprobed (before)": open_unprobed,
            }
            wall: dict[str, list[float]] = {k: [] for k in cases}
            cpu: dict[str, list[float]] = {k: [] for k in cases}
            print(f"load before: {os.getloadavg()[0]:.2f}")
            for _ in range(args.rounds):
                for name, run in cases.items():
                    w, c = time.perf_counter(), time.process_time()
                    run()
                    wall[name].append((time.perf_counter() - w) / len(paths) * 1e6)
                    cpu[name].append((time.process_time() - c) / len(paths) * 1e6)
            print(f"load after: {os.getloadavg()[0]:.2f}")
            print(f"{len(paths)} files of {args.size} B, {args.rounds} rounds, medians per file")
            for name in cases:
                print(
                    f"{name:30s} wall {statistics.median(wall[name]):7.1f} us   cpu {statistics.median(cpu[name]):7.1f} us"
                )
        finally:
            fs.close()


if __name__ == "__main__":
    main()
