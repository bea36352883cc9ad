"""The workspace daemon keeps freed megabyte buffers in its heap (fuse_adapter/allocator.py).

A glibc process serves a 4 MiB block (a chunk buffer of the daemon path) with a mapping of
its own and unmaps it when freed, so every chunk's pages were faulted in again; after
``keep_large_buffers`` the block comes from the heap and is reused. Checked in a fresh
interpreter (the settings are process-wide), by where the block lies: in the heap or not.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

PROBE = """
import ctypes, sys
from fuse_adapter.allocator import keep_large_buffers

def in_heap(buf):
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    with open("/proc/self/maps") as fh:
        for line in fh:
            if line.rstrip().endswith("[heap]"):
                low, high = (int(x, 16) for x in line.split()[0].split("-"))
                if low <= address < high:
                    return True
    return False

if sys.argv[1] == "tuned":
    assert keep_large_buffers()
first = bytearray(4 * 1024**2)
print(in_heap(first))
"""

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)


def _in_heap(mode: str) -> bool:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_a_chunk_sized_buffer_comes_from_the_heap_after_keep_large_buffers():
    assert not _in_heap("default")  # the probe tells: glibc maps such a block on its own
    assert _in_heap("tuned")
