"""Thumbnails are bounded: at most ``max_concurrent`` decodes at once, no preview of an
original above ``max_source_bytes`` (it is never read), and each is made once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from datahub.errors import PayloadTooLarge
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from datahub.web.images import ImageSource
from tests.browser.conftest import jpeg, make_env


class Watched(ImageSource):
    """The real source, watching how many originals are read at once.

    Each read waits (up to a generous guard) until ``limit`` reads overlap, so a missing
    bound shows up as more than ``limit`` at once rather than depending on timing."""

    def __init__(self, *args, limit: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.limit, self.active, self.peak, self.reads = limit, 0, 0, 0
        self.lock, self.full = threading.Lock(), threading.Event()

    def read(self, ref: ObjectRef) -> bytes:
        with self.lock:
            self.active += 1
            self.reads += 1
            self.peak = max(self.peak, self.active)
            if self.active >= self.limit:
                self.full.set()
        try:
            self.full.wait(timeout=10)
            return super().read(ref)
        finally:
            with self.lock:
                self.active -= 1


@pytest.fixture
def refs(tmp_path: Path):
    env = make_env(tmp_path)
    refs = []
    for i in range(8):
        info = env.objects.put(f"img/{i}.jpg", jpeg((i * 30, 90, 200)))
        refs.append(ObjectRef(env.objects.url_for(f"img/{i}.jpg"), info.etag, info.size))
    yield env, refs
    env.stores.close()
    env.catalog.close()


def test_at_most_max_concurrent_decodes_and_each_made_once(refs, tmp_path: Path):
    env, refs = refs
    source = Watched(tmp_path / "previews", stores=env.stores, max_concurrent=2, limit=2)
    threads = [threading.Thread(target=source.preview, args=(ref, "thumb")) for ref in refs * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert source.peak == 2
    assert source.reads == len(refs)  # the second request of each waited, then found it made
    assert len(list((tmp_path / "previews").glob("*.jpg"))) == len(refs)


def test_an_original_too_large_is_never_read(refs, tmp_path: Path):
    env, refs = refs
    source = Watched(tmp_path / "previews", stores=StoreRegistry(env.config), max_source_bytes=100, limit=1)
    with pytest.raises(PayloadTooLarge, match="more than the 100"):
        source.preview(refs[0], "thumb")
    assert source.reads == 0
