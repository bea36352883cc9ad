"""review72: a shard copy written while a read copies a sample out of it is never returned.

``ShardReader`` checks the file it maps (one ``fstat``) against the state it was verified in,
then reads: a write landing between that check and the copy of the sample (another tool
rewriting the copy in place, the case review71 guards) was returned as the sample. pyfuse3's
READs in C check after their pread for the same reason (fastread.h). The damage is done by
another process, so no GIL orders it against the read: it lands anywhere in a read.
"""

from __future__ import annotations

import hashlib
import os
import select
import subprocess
import sys
from pathlib import Path

from datahub.errors import ObjectChanged
from datahub.pack.shard import ShardReader, ShardWriter, file_identity

TRIALS = 200
VALUE = 2 << 20  # a sample copied in a few hundred microseconds: a write lands in most reads

# reads "path<TAB>offset<TAB>byte" lines; writes that byte there in place; answers "ok"
_DAMAGER = (
    "import os, sys\n"
    "for line in sys.stdin:\n"
    "    path, at, byte = line.rstrip('\\n').split('\\t')\n"
    "    fd = os.open(path, os.O_WRONLY)\n"
    "    os.pwrite(fd, bytes([int(byte)]), int(at))\n"
    "    os.close(fd)\n"
    "    print('ok', flush=True)\n"
)


def test_a_write_racing_a_read_is_never_returned(tmp_path: Path) -> None:
    value = os.urandom(VALUE)
    good_path = tmp_path / "good.lmdb"
    writer = ShardWriter(good_path)
    writer.put("k", value)
    writer.finish()
    good = good_path.read_bytes()
    digest = hashlib.sha256(good).hexdigest()
    at = good.find(value) + len(value) - 1  # the sample's last byte: copied last
    damager = subprocess.Popen(
        [sys.executable, "-S", "-c", _DAMAGER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    wrong: list[int] = []
    refused = 0
    try:
        for trial in range(TRIALS):
            path = tmp_path / f"copy-{trial}.lmdb"
            path.write_bytes(good)
            reader = ShardReader(
                path, identity=file_identity(path.stat()), sha256=digest, where="shard k of t@v1"
            )
            try:
                assert reader.get("k") == value
                damager.stdin.write(f"{path}\t{at}\t{good[at] ^ 0xFF}\n")
                damager.stdin.flush()
                written = False
                while True:
                    try:
                        got = reader.get("k")
                    except ObjectChanged:
                        refused += 1
                        break
                    if got != value:
                        wrong.append(trial)
                        break
                    assert not written, "a read after the write returned the old bytes of a changed file"
                    if select.select([damager.stdout], [], [], 0)[0]:
                        assert damager.stdout.readline() == "ok\n"
                        written = True
                if not written:
                    assert damager.stdout.readline() == "ok\n"
            finally:
                reader.close()
                path.unlink()
    finally:
        damager.stdin.close()
        damager.wait(timeout=30)
    assert not wrong, f"{len(wrong)} of {TRIALS} reads racing a write returned the changed sample"
    assert refused == TRIALS
