"""What ``VersionDataset.from_catalog`` pays per record for hiding a file beside a directory
of its name (``datahub.torch.datasets._files``): the version's listing as a plain list against
the same listing through ``_files``, same run, same catalog, the order of the two swapped
every round (the first of a pair runs slower on a loaded machine).

    .venv/bin/python bench/catalog/version_dataset_listing.py [--records 50000] [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from datahub.catalog import Put, Record, open_catalog
from datahub.config import load_config
from datahub.torch.datasets import _files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    n = args.records
    with tempfile.TemporaryDirectory(prefix="fsdirs18-bench-") as home:
        config = load_config(env={}, overrides={"home": home})
        catalog = open_catalog(config.resolved_catalog_url)
        try:
            catalog.create_dataset("ds")
            keys = (f"train/c{i % 100:03d}/{i:07d}.jpg" for i in range(n))
            catalog.commit(
                "ds", [Put(Record(k, f"file:///none/{i}", f"e{i}", 1000)) for i, k in enumerate(keys)]
            )
            cases = {"listing only": list, "listing + _files": lambda records: _files(records, None)}
            cpu: dict[str, list[float]] = {k: [] for k in cases}
            print(f"load before: {os.getloadavg()[0]:.2f}")
            for r in range(args.rounds):
                for name in list(cases)[:: 1 if r % 2 == 0 else -1]:
                    start = time.process_time()
                    assert len(cases[name](catalog.list_records("ds", 1))) == n
                    cpu[name].append((time.process_time() - start) / n * 1e6)
            print(f"load after: {os.getloadavg()[0]:.2f}")
            print(f"{n} records, {args.rounds} rounds, CPU per record (median, min)")
            for name, values in cpu.items():
                print(f"{name:18s} {statistics.median(values):6.2f} us  {min(values):6.2f} us")
        finally:
            catalog.close()


if __name__ == "__main__":
    main()
