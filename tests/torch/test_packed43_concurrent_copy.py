"""packed43: two threads of one process downloading the same shard copy at once (a train and
a validation PackedDataset of one version, opened together) wrote one ``NAME.<pid>.tmp``; the
second rename found it gone (a bare FileNotFoundError), after the first had renamed a file the
second was still rewriting into place."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from datahub.catalog import Record

CHUNKS = 8


class MeetingSource:
    """Serves ``data``; each caller's first read waits until the other caller has made its
    first read too (so both downloads are under way at once)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.meet = threading.Barrier(2, timeout=30)
        self.first: set[int] = set()

    def read(self, record: Record, offset: int = 0, size: int | None = None) -> bytes:
        me = threading.get_ident()
        if me not in self.first:
            self.first.add(me)
            self.meet.wait()
        return self.data[offset : offset + (len(self.data) if size is None else size)]


def test_two_threads_copying_one_shard_both_get_its_bytes(tmp_path: Path, monkeypatch) -> None:
    from datahub.torch import datasets

    monkeypatch.setattr(datasets, "_CHUNK", 4096)  # several reads per copy
    data = os.urandom(CHUNKS * 4096)
    record = Record("shards/00000-of-00001.lmdb", "s3://b/s", "e1", len(data),
                    "sha256:" + hashlib.sha256(data).hexdigest())  # fmt: skip
    source = MeetingSource(data)
    got: dict[int, object] = {}

    def copy(i: int) -> None:
        try:
            got[i] = datasets._local_copy(source, record, tmp_path, "photos@v1").read_bytes() == data
        except Exception as exc:  # what the thread's caller would see
            got[i] = exc

    threads = [threading.Thread(target=copy, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == {0: True, 1: True}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{record.checksum[7:39]}.lmdb", f"{record.checksum[7:39]}.lmdb.verified"]
    )  # no temporary file left behind
