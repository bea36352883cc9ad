"""Where a big file's bytes cost the daemon CPU: ``perf`` of a workspace mount's daemon.

    .venv/bin/python bench/writeback/profile_big.py [--files 32] [--size 16777216]
        [--threads 1] [--flags=--no-passthrough] [--perf-out FILE]

Issue 41 (bigwrites20). Mounts a workspace from this tree (``mount_writes.Mount``: local
shared tier, flush interval an hour, so the flusher's sha256 never runs here), writes a few
files to warm it up, then ``perf record -g`` of the daemon while ``--files`` files of
``--size`` bytes are written in 1 MiB calls and closed. Prints the daemon's CPU per MiB
(utime + stime, all its threads), the samples by stage (a stage is a kernel or library
function and everything it calls: the share of samples with it on the stack) and the
symbols with the most samples of their own. The stages: reading the WRITE requests from
/dev/fuse, the chunk writes (page cache or direct), their fsyncs, LMDB's commits, the
CRC-32 and sha256 passes, user-space memory copies (the request's bytes into Python and
into the chunk buffers), and the Python interpreter itself.
Needs root (``perf`` attached to the daemon).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_writes import Mount, cpu_seconds, load, write_files

MiB = 1024**2
STAGES = {  # label -> symbols whose inclusive share counts as the stage
    "WRITE requests read from /dev/fuse": ["fuse_dev_do_read"],
    "chunk writes, page cache (copy into new pages)": ["generic_perform_write", "ext4_buffered_write_iter"],
    "chunk writes, O_DIRECT": ["iomap_dio_rw", "__iomap_dio_rw"],
    "splice copies (staged files)": ["do_splice", "splice_file_to_pipe", "iter_file_splice_write"],
    "fsync / fdatasync": ["ext4_sync_file"],
    "LMDB commits": ["mdb_txn_commit"],
    "CRC-32 (zlib)": ["crc32_z", "crc32"],
    "sha256 (OpenSSL)": ["sha256_block_data_order", "SHA256_Update", "sha256_block_data_order_avx2"],
    "user-space memcpy": [
        "__memmove_avx512_unaligned_erms",
        "__memmove_avx_unaligned_erms",
        "__memcpy_avx_unaligned_erms",
    ],
    "Python interpreter (own samples)": ["_PyEval_EvalFrameDefault"],
}


def perf_shares(data: str, children: bool) -> dict[str, float]:
    """symbol -> percent of samples (with its callees when ``children``)."""
    cmd = ["perf", "report", "-i", data, "--stdio", "--sort", "sym", "-g", "none"]
    cmd.append("--children" if children else "--no-children")
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    shares: dict[str, float] = {}
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(?:([\d.]+)%\s+)?\[[.k]\]\s+(\S+)", line)
        if m:
            shares.setdefault(m.group(3), float(m.group(1)))
    return shares


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--size", type=int, default=16 * MiB)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--flags", default="--no-passthrough", help="mount flags, comma-separated")
    ap.add_argument("--perf-out", default=None, help="keep perf's data here")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wb-profile-"))
    data = os.urandom(args.size)
    mount = Mount(root, "p", [f for f in args.flags.split(",") if f])
    perf_data = args.perf_out or str(root / "perf.data")
    try:
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load before: {load()}")
        print(f"# pyfuse3: {mount.build()}")
        write_files(mount.mnt / "warm", 4, data, args.threads, False)
        perf = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(mount.pid), "-o", perf_data],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(1)
        before = cpu_seconds(mount.pid)
        secs = write_files(mount.mnt / "run", args.files, data, args.threads, False)
        cpu = cpu_seconds(mount.pid) - before
        perf.send_signal(2)
        perf.wait()
        mib = args.files * args.size / MiB
        print(f"{args.files} x {args.size:,} B, {args.threads} writer(s), mount {args.flags}: "
              f"{mib / secs:.0f} MiB/s, daemon CPU {1000 * cpu / mib:.2f} ms/MiB; load after: {load()}")  # fmt: skip
        inclusive = perf_shares(perf_data, children=True)
        print("stage: share of the daemon's samples with it on the stack")
        for label, symbols in STAGES.items():
            share = max((inclusive.get(s, 0.0) for s in symbols), default=0.0)
            print(f"  {label:48s} {share:5.1f} %")
        print("symbols with the most samples of their own:")
        for sym, share in sorted(perf_shares(perf_data, children=False).items(), key=lambda kv: -kv[1])[:15]:
            print(f"  {share:5.1f} %  {sym}")
    finally:
        mount.umount()
        subprocess.run(["rm", "-rf", str(root)], check=False)


if __name__ == "__main__":
    main()
