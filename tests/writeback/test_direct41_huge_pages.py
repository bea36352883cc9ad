"""direct41 (issue 41): the aligned buffer a chunk's O_DIRECT write goes out of is backed by
transparent huge pages where the kernel offers them. Why it matters: a direct write's disk
request has one segment per physically contiguous run of the buffer; from 4 KiB pages a 16
MiB chunk was 4,096 segments, and the test VM's virtual disk took 2-5x as long for them as
for the same bytes in 2 MiB runs, which made the chunk's write + fsync about twice local
disk's buffered write + fsync (docs/benchmarks.md, "direct41"). Checked in this process's
own memory map (``/proc/self/smaps``): the mapping that appears with the first chunk write
holds huge pages. Real files, in-process; skipped where the kernel has no transparent huge
pages or has them turned off."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from datahub.aligned_buffers import AlignedBuffers
from datahub.cache import directio
from datahub.storage.local import LocalStore
from datahub.writeback import chunks as chunks_module
from datahub.writeback.chunks import ChunkStore

#: each test compacts memory first (``_compact_memory``: a sysctl write, so run alone)
pytestmark = pytest.mark.exclusive

MiB = 1 << 20
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _huge_kb_by_mapping() -> dict[str, int]:
    """Each mapping of this process (its address range) and its anonymous huge pages, in KiB."""
    sizes: dict[str, int] = {}
    current = ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^([0-9a-f]+-[0-9a-f]+) ", line)
        if head:
            current = head.group(1)
            sizes[current] = 0
        elif line.startswith("AnonHugePages:"):
            sizes[current] = int(line.split()[1])
    return sizes


@pytest.fixture
def store(tmp_path: Path) -> ChunkStore:
    if not THP.exists() or "[never]" in THP.read_text():
        pytest.skip("no transparent huge pages on this kernel (or turned off): buffers get 4 KiB pages")
    size = int((THP.parent / "hpage_pmd_size").read_text())
    if size != 2 * MiB:
        pytest.skip(f"huge page size {size}: the checks below count 2 MiB pages")
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout
    if kind.strip() == "tmpfs":
        pytest.skip("tmpfs refuses O_DIRECT: chunks go through the page cache, no buffer")
    _compact_memory()
    return ChunkStore(LocalStore(tmp_path / "root"), "writeback/ws", "workspace 'ws'", pack_bytes=0)


def _compact_memory() -> None:
    """Ask the kernel to make free 2 MiB runs first (as root): on a machine whose memory is
    fragmented (a long-lived VM with its page cache full, a container image built beside the
    suite) a huge-page fault falls back to 4 KiB pages (/proc/vmstat ``thp_fault_fallback``)
    and these checks failed with no code of ours at fault (stop 74, a loaded suite run)."""
    try:
        Path("/proc/sys/vm/compact_memory").write_text("1")
    except OSError:
        pass  # not root: the kernel's own defragmentation at fault is all there is


def test_a_chunk_is_written_out_of_a_buffer_of_huge_pages(store: ChunkStore, monkeypatch) -> None:
    monkeypatch.setattr(chunks_module, "_spare", AlignedBuffers(keep=4))  # no kept buffer: a new one
    before = _huge_kb_by_mapping()
    data = os.urandom(4 * MiB)
    key = store.put(41, 0, data, "ckpt/model.pt")
    assert store.get(key, len(data), "ckpt/model.pt") == data
    # the new buffer is kept for the next write, so still mapped: its 4 MiB in 2 MiB pages
    new = {span: kb for span, kb in _huge_kb_by_mapping().items() if span not in before}
    assert sum(new.values()) >= 4096, new


def test_a_chunk_of_one_page_and_a_tail_touches_one_huge_page(store: ChunkStore, monkeypatch) -> None:
    # a small chunk's head fills the buffer's first 4 KiB only: one 2 MiB page allocated, not
    # two, and the bytes come back exactly (the head from the buffer's huge-page boundary)
    monkeypatch.setattr(chunks_module, "_spare", AlignedBuffers(keep=4))
    before = _huge_kb_by_mapping()
    data = os.urandom(4096 + 99)
    key = store.put(42, 0, data, "a")
    assert store.get(key, len(data), "a") == data
    new = {span: kb for span, kb in _huge_kb_by_mapping().items() if span not in before}
    assert sum(new.values()) == 2048, new


def test_a_large_page_file_of_the_disk_tier_is_written_out_of_huge_pages(
    store: ChunkStore, tmp_path: Path, monkeypatch
) -> None:
    # the disk tier's O_DIRECT page writes (datahub.cache.directio) take their buffers from the
    # same pool type: a 4 MiB page file goes out of 2 MiB pages too, and reads back exactly
    monkeypatch.setattr(directio, "_buffers", AlignedBuffers(keep=4))
    before = _huge_kb_by_mapping()
    header, data = b"H" * 100, os.urandom(4 * MiB)
    path = tmp_path / "page"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
    try:
        directio.write_direct(fd, header, data, "page")
    finally:
        os.close(fd)
    assert path.read_bytes() == header + data
    new = {span: kb for span, kb in _huge_kb_by_mapping().items() if span not in before}
    assert sum(new.values()) >= 4096, new
