"""One big file written in one stream with no fsync (``torch.save``), through a workspace
mount with staged files: is it refused at close, and what does it cost?

    .venv/bin/python bench/writeback/big_stream.py [--size-mib 1024] [--pieces 1048576,65536]
        [--rounds 3] [--dir DIR] [--base-tree DIR]

Issue 41, blocker (a) of docs/writeback.md point 7: a staged file is committed only while
it lies inside the blocks reserved for it, and before the watcher (``modwatch.py``) the
reservation moved only at an fsync, so such a file was refused (ENOSPC at close) whenever it
grew past 64 MiB. Per round and write size, taking turns: the file written to local disk
with fsync before close (the baseline), then through ``mount --passthrough`` of this tree
(and of ``--base-tree``, an A/B in one run, in reverse order every other round). Printed per
case: refusals (close failed with ENOSPC) out of the rounds, MiB/s of the closes that
succeeded (median), the daemon's CPU per MiB (utime+stime), and ``uptime`` before and
after: on the shared machine only the refusal count and CPU per MiB are figures; MiB/s
ratios under load are noise.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_writes import REPO, Mount, cpu_seconds, load

MiB = 1024**2


def stream(path: Path, size: int, piece: int, fsync: bool) -> tuple[float, bool]:
    """Write ``size`` bytes in ``piece`` calls and close: (seconds, refused at close)."""
    data = memoryview(os.urandom(piece))
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(size // piece):
            os.write(fd, data)
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    try:
        os.close(fd)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return time.perf_counter() - start, True
    return time.perf_counter() - start, False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--pieces", default=f"{MiB},{64 * 1024}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--base-tree", help="another checkout: its mount too, taking turns with this tree's")
    args = ap.parse_args()
    size = args.size_mib * MiB
    root = Path(tempfile.mkdtemp(prefix="wb-stream-", dir=args.dir))
    trees = {"head": REPO, **({"base": Path(args.base_tree).resolve()} if args.base_tree else {})}
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  dir {root}  file {args.size_mib} MiB")
    print(f"# load before: {load()}", flush=True)
    mounts = {name: Mount(root, name, ["--passthrough"], repo=tree) for name, tree in trees.items()}
    try:
        time.sleep(1)
        for name, m in mounts.items():
            writes = [line for line in m.log().splitlines() if "writes:" in line]
            print(
                f"# mount --passthrough ({name}): pid {m.pid}; {writes[-1].split(': ', 1)[-1] if writes else '?'}"
            )
        for piece in (int(p) for p in args.pieces.split(",")):
            speeds: dict[str, list[float]] = {"local+fsync": [], **{k: [] for k in mounts}}
            cpu: dict[str, list[float]] = {k: [] for k in mounts}
            refused: dict[str, int] = {k: 0 for k in mounts}
            for r in range(args.rounds):
                local = root / "local"
                local.mkdir(exist_ok=True)
                secs, _ = stream(local / "f", size, piece, True)
                speeds["local+fsync"].append(size / MiB / secs)
                (local / "f").unlink()
                order = list(mounts.items())
                for name, m in order[::-1] if r % 2 else order:
                    before = cpu_seconds(m.pid)
                    secs, no = stream(m.mnt / f"f-{piece}-{r}", size, piece, False)
                    cpu[name].append((cpu_seconds(m.pid) - before) / (size / MiB))
                    (m.mnt / f"f-{piece}-{r}").unlink(missing_ok=True)  # a refused new file is gone
                    if no:
                        refused[name] += 1
                    else:
                        speeds[name].append(size / MiB / secs)
            base = statistics.median(speeds["local+fsync"])
            print(f"{piece // 1024:5d} KiB writes: local+fsync {base:6.0f} MiB/s "
                  f"(rounds {', '.join(f'{s:.0f}' for s in speeds['local+fsync'])})")  # fmt: skip
            for name in mounts:
                mine = statistics.median(speeds[name]) if speeds[name] else 0.0
                print(f"  mount --passthrough ({name}): refused {refused[name]}/{args.rounds}; "
                      f"{mine:6.0f} MiB/s, ratio {mine / base:4.2f} (closes that succeeded); daemon CPU "
                      f"{1000 * statistics.median(cpu[name]):.2f} ms/MiB", flush=True)  # fmt: skip
        for name, m in mounts.items():
            outran = [line for line in m.log().splitlines() if "before more could be reserved" in line]
            print(
                f"# mount --passthrough ({name}): {len(outran)} files outran the watcher (the daemon's log)"
            )
            for line in outran[:5]:
                print(f"#   {line.split(': ', 1)[-1]}")
        print(f"# load after: {load()}")
    finally:
        for m in mounts.values():
            m.umount()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
