"""The shared tier writes behind: a fill returns before the upload, within a byte bound."""

from __future__ import annotations

import threading
import uuid

from datahub.cache import SharedTier
from datahub.cache.pages import PageKey
from datahub.storage import MemoryStore


class GatedStore(MemoryStore):
    """A memory store whose puts wait for ``gate``: an upload that is slow on purpose."""

    def __init__(self) -> None:
        super().__init__(f"wb-{uuid.uuid4().hex[:8]}")
        self.gate = threading.Event()
        self.puts = 0

    def put(self, key, data, size=None):
        self.gate.wait(30)
        self.puts += 1
        return super().put(key, data, size)


def key(i: int) -> PageKey:
    return PageKey(f"s3://bucket/obj{i}", "e", 1024, 0)


def test_put_returns_before_the_upload_and_queued_pages_are_served() -> None:
    store = GatedStore()
    tier = SharedTier(store, 1 << 20, write_behind_bytes=4096)
    try:
        assert tier.put(key(1), b"a" * 1000)  # the gate is shut: only queued
        assert tier.contains(key(1)) and tier.get(key(1)) == b"a" * 1000
        assert store.puts == 0
        store.gate.set()
        assert tier.flush(timeout=30)
        assert store.puts == 1 and tier.get(key(1)) == b"a" * 1000
        assert tier.stats()["fills"] == 1
    finally:
        store.gate.set()
        tier.close()


def test_a_full_queue_makes_puts_wait_for_room_instead_of_dropping() -> None:
    store = GatedStore()
    tier = SharedTier(store, 1 << 20, write_behind_bytes=2500)
    done = threading.Event()
    try:
        assert tier.put(key(1), b"a" * 1000) and tier.put(key(2), b"b" * 1000)

        def third() -> None:
            tier.put(key(3), b"c" * 1000)  # 3000 > 2500 bytes queued: waits
            done.set()

        threading.Thread(target=third, daemon=True).start()
        assert not done.wait(0.3)
        store.gate.set()
        assert done.wait(30) and tier.flush(timeout=30)
        assert store.puts == 3 and all(tier.get(key(i)) is not None for i in (1, 2, 3))
    finally:
        store.gate.set()
        tier.close()


def test_delete_of_a_queued_page_wins_and_close_uploads_the_rest() -> None:
    store = GatedStore()
    tier = SharedTier(store, 1 << 20)
    assert tier.put(key(1), b"a" * 1000) and tier.put(key(2), b"b" * 1000)
    tier.delete(key(2))  # key 1 may be uploading (waiting at the gate); key 2 is still queued
    assert tier.get(key(2)) is None
    store.gate.set()
    tier.close()
    again = SharedTier(store, 1 << 20)
    try:
        assert again.get(key(1)) == b"a" * 1000 and again.get(key(2)) is None
    finally:
        again.close()
