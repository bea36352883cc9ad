"""Image bytes for the web UIs (LabelX, the dataset browser) and for models: read through
the datahub cache, resized with Pillow.

The one place the web UIs make pictures, so both bound them the same way. Originals are read
by ``ImageSource.read`` (the one function that decides between the TieredCache and a direct
StoreRegistry read) with the record's etag, so a changed object is an ObjectChanged error,
never a wrong picture. Previews are JPEGs keyed by (url, etag, the record's size, preview
kind): the key names immutable bytes, so a preview never goes stale, and a record claiming
another size than the object's never finds the object's preview (its own read fails with
ObjectChanged; named by URL and etag alone, the preview made for the object's own record was
served to it, review32). They live on disk (LabelX: ``<home>/labelx/previews``,
the browser: ``<home>/browser/previews``) within a byte budget (oldest evicted first).

Making a preview is bounded twice: originals larger than ``max_source_bytes`` are refused
(a page of thumbnails must not pull a 2 GB TIFF through the cache), and at most
``max_concurrent`` previews are decoded at once per source, so a page asking for 50
thumbnails queues them instead of running 50 decoders on a 2-core machine.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from datahub.cache import selfverify
from datahub.errors import InvalidInput, ObjectChanged, PayloadTooLarge
from datahub.storage.base import ObjectRef

log = logging.getLogger(__name__)
PREVIEW_SIZES = {"thumb": 192, "preview": 1280}
Image.MAX_IMAGE_PIXELS = 200_000_000
MAX_SOURCE_BYTES = 64 * 1024**2


class ImageSource:
    def __init__(
        self,
        preview_dir: Path,
        *,
        cache: Any = None,
        stores: Any = None,
        budget_bytes: int = 512 * 1024**2,
        max_concurrent: int = 4,
        max_source_bytes: int = MAX_SOURCE_BYTES,
    ) -> None:
        self.cache, self.stores = cache, stores
        self.max_source_bytes = max_source_bytes
        self._decoders = threading.BoundedSemaphore(max_concurrent)
        self._makers: dict[str, list] = {}  # preview name -> [its lock, requests holding or waiting]
        self.preview_dir = Path(preview_dir)
        self.preview_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # dataset images: this uid's
        self.budget = budget_bytes
        self._lock = threading.Lock()
        self._used = sum(p.stat().st_size for p in self.preview_dir.glob("*.jpg"))

    def read(self, ref: ObjectRef) -> bytes:
        """The original bytes, verified against the recorded etag."""
        if self.cache is not None:
            return self.cache.read(ref)
        # Bounded by the record's size, plus one byte only a longer object has: unbounded, a
        # record claiming a few bytes of a multi-GB object downloaded all of it, and a record
        # shorter than its object previewed the whole object (shortrec15's finding; the cache's
        # reads make the same check, datahub.cache.origin.read_range).
        # Through the mount's verified read (``selfverify``): a record of an objects-store blob
        # replaced by its own bytes, which the mount serves, failed here for good (leftovers18)
        store, key = self.stores.for_url(ref.url)
        data = selfverify.read(self.stores, store, key, ref.url, ref.etag, 0, ref.size + 1)
        if len(data) != ref.size:
            raise ObjectChanged(
                f"object {ref.url} holds {'more than ' if len(data) > ref.size else ''}{len(data)} "
                f"bytes where its record says {ref.size} (etag {ref.etag}): the record does not "
                "describe the object; re-import it or read a version that records it",
                url=ref.url,
                etag=ref.etag,
            )
        return data

    def hint(self, refs: list[ObjectRef]) -> None:
        """Tell the cache which originals the annotator will open next, so they arrive early."""
        if self.cache is not None and refs:
            self.cache.hint(refs)

    def preview(self, ref: ObjectRef, kind: str) -> bytes:
        """A JPEG no larger than PREVIEW_SIZES[kind] on its long side (cached on disk)."""
        if kind not in PREVIEW_SIZES:
            raise InvalidInput(f"unknown preview size {kind!r}; use one of {', '.join(PREVIEW_SIZES)}")
        # the record's size is part of the name: only the read that made the file checked the
        # object against a record, so a file named by URL and etag alone answered records of
        # any size (review32)
        name = hashlib.sha256(f"{ref.url}\0{ref.etag}\0{ref.size}\0{kind}".encode()).hexdigest() + ".jpg"
        path = self.preview_dir / name
        try:
            return path.read_bytes()
        except FileNotFoundError:
            pass
        if ref.size > self.max_source_bytes:
            raise PayloadTooLarge(
                f"{ref.url} is {ref.size} bytes, more than the {self.max_source_bytes} a preview is "
                "made from; download the original instead"
            )
        with self._making(name), self._decoders:
            try:  # another request for the same preview made it while this one waited
                return path.read_bytes()
            except FileNotFoundError:
                pass
            data = _resize(self.read(ref), PREVIEW_SIZES[kind], ref.url)
            tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # no other user reads it
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)  # readers see the whole preview or none
        self._account(len(data))
        return data

    @contextmanager
    def _making(self, name: str) -> Iterator[None]:
        """One maker per preview: a page that asks twice for a picture decodes it once."""
        with self._lock:
            entry = self._makers.setdefault(name, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._makers[name]

    def _account(self, added: int) -> None:
        with self._lock:
            self._used += added
            over = self._used > self.budget
        if over:
            self._evict()

    def _evict(self) -> None:
        files = sorted(self.preview_dir.glob("*.jpg"), key=lambda p: p.stat().st_mtime)
        used = sum(p.stat().st_size for p in files)
        target = int(self.budget * 0.8)
        for p in files:
            if used <= target:
                break
            size = p.stat().st_size
            p.unlink(missing_ok=True)
            used -= size
        with self._lock:
            self._used = used

    def rgb(self, ref: ObjectRef, side: int) -> bytes:
        """Raw RGB bytes (side x side x 3) of the image squashed to a square, for models."""
        with _open(self.read(ref), ref.url) as im:
            return im.convert("RGB").resize((side, side), Image.BILINEAR).tobytes()

    def size(self, ref: ObjectRef) -> tuple[int, int]:
        """Width and height of the original (only the header is decoded)."""
        with _open(self.read(ref), ref.url) as im:
            return im.size


def _open(data: bytes, url: str) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except (UnidentifiedImageError, OSError) as exc:
        raise InvalidInput(f"{url} is not an image Pillow can read ({exc})") from exc


def _resize(data: bytes, side: int, url: str) -> bytes:
    with _open(data, url) as im:
        try:
            im.draft("RGB", (side, side))  # JPEG: decode at reduced scale, much faster
            im = im.convert("RGB")
            im.thumbnail((side, side))
        except OSError as exc:
            raise InvalidInput(f"{url} is a damaged image ({exc})") from exc
        out = io.BytesIO()
        im.save(out, "JPEG", quality=85)
        return out.getvalue()
