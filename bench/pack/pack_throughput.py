"""Pack throughput in images/s: 2 worker processes against 1 (the baseline), same photos.

    .venv/bin/python bench/pack/pack_throughput.py [--photos 240] [--size 1024x768]

Both runs pack the same imported version (resize shorter=256, JPEG q90) into different
targets with small shards so both workers have tasks; time includes starting the worker
processes, planning and committing, i.e. what ``datahub pack`` costs end to end. CPU seconds (this process plus the worker
processes) give images per CPU-second, which shows the work per image even when other
jobs compete for the cores: on N idle cores the ceiling is about N times that rate.
"""

from __future__ import annotations

import argparse
import resource
import time

from _setup import MACHINE, fresh_home, import_photos, photo_files

from datahub.pack import PackSpec, pack


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--photos", type=int, default=240)
    p.add_argument("--size", default="1024x768")
    args = p.parse_args()
    w, h = map(int, args.size.split("x"))
    home, config, catalog = fresh_home("bench-pack-")
    manifest = photo_files(home / "photos", args.photos, 24, w, h)
    import_photos(config, catalog, manifest, "photos")
    print(f"# pack throughput, {args.photos} JPEGs {w}x{h}, resize shorter=256; {MACHINE}")
    print("| workers | seconds | images/s | vs 1 worker | CPU s (all processes) | images per CPU-second |")
    print("|---|---|---|---|---|---|")
    base = None
    for workers in (1, 2):
        spec = PackSpec.parse(resize="shorter=256", shard_size="2MiB")
        t, cpu = time.perf_counter(), _cpu()
        result = pack(config, catalog, "photos", f"packed-{workers}", spec, workers=workers)
        secs, cpu = time.perf_counter() - t, _cpu() - cpu
        rate = result.samples / secs
        base = base or rate
        print(
            f"| {workers} | {secs:.1f} | {rate:.1f} | {rate / base:.2f}x | {cpu:.1f} | {result.samples / cpu:.1f} |"
        )


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    main()
