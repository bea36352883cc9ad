"""S3 writes: a single PUT up to ``multipart_threshold``, else a streamed multipart upload.

Split from ``s3`` (reads, listing, the SDK boundary) because writing has its own concerns:
how many bytes are held in memory (one part per upload slot), part sizing within S3's
10,000-part limit, declared-size checks, and aborting a failed upload so nothing
half-written stays behind. ``S3Writes`` is mixed into ``S3Store``; every SDK call still
goes through ``S3Store._call`` (one translation, one retry policy), so this module imports
no SDK.
"""

from __future__ import annotations

import base64
import io
import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, TypeVar

from datahub.errors import DatahubError, InvalidInput, ObjectChanged, ObjectNotFound
from datahub.storage.base import ObjectInfo
from datahub.storage.etags import Md5Etags
from datahub.storage.retry import remaining
from datahub.storage.s3errors import unquote_etag

log = logging.getLogger("datahub.storage.s3")
T = TypeVar("T")

MIN_PART = 5 * 1024**2  # S3 (and Ceph RGW by default) refuse smaller parts except the last
MAX_PARTS = 10_000
RECORD_META = "datahub-record"  # the user metadata ``put_with_record`` stores a record in
RECORD_MAX = 2048 - len(RECORD_META)  # base64 bytes: AWS keeps 2 KB of user metadata, names included
# the record ``keeps_records`` stores and reads back: the largest ``record_fits`` takes
# (1,524 bytes, 2,032 in base64), every byte value in it
PROBE_RECORD = (b"datahub record probe\n" + bytes(range(256)) * 6)[: RECORD_MAX // 4 * 3]


def read_exactly(fh: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes; fewer only at end of file (raw files may return short reads)."""
    parts, got = [], 0
    while got < n:
        chunk = fh.read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _payload(data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """A put's body: ``bytes`` as they are, a flat view of unsigned bytes as it lies (the
    caller keeps its bytes unchanged until the put returns: a write-back chunk's buffer,
    ``ChunkStore.write``), anything else copied into ``bytes``. Why the view (perf41f): the
    lean PUT hashes and sends any bytes-like body, and a copy of a 4 MiB chunk was new memory
    for every chunk, faulted in by the upload thread."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, memoryview) and data.ndim == 1 and data.format == "B" and data.contiguous:
        return data
    return bytes(data)


def _remaining_size(fh: BinaryIO) -> int | None:
    """Bytes left in a seekable file, else None (pipes, sockets, generators)."""
    try:
        if not fh.seekable():
            return None
        here = fh.tell()
        end = fh.seek(0, io.SEEK_END)
        fh.seek(here)
        return end - here
    except (OSError, AttributeError, ValueError):
        return None


class S3Writes:
    """``put`` for ``S3Store``: needs its bucket, key prefix, root URL, multipart settings,
    ``_call``, ``_client``, ``_clock`` and ``stat`` (declared here for the type checker)."""

    bucket: str
    prefix: str  # every key's prefix in the bucket ("" or ending in "/")
    root_url: str
    multipart_threshold: int
    multipart_chunk: int
    multipart_concurrency: int
    _client: Any
    _conn: Any  # its S3Connection: the lean path, when it has one
    _clock: Callable[[], float]
    _records_kept: bool | None = None  # ``keeps_records``' answer, once it had one
    _probe_lock = threading.Lock()  # one probe at a time (any store: they are rare)

    def _call(self, full_key: str | None, fn: Callable[[], T], expected_etag: str | None = None) -> T:
        raise NotImplementedError

    def stat(self, key: str) -> ObjectInfo:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def put(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        """Single PUT up to ``multipart_threshold`` bytes, else multipart streamed in parts.

        Memory held: at most one part (or the whole object below the threshold), so every
        request body is bytes that a retry can resend.
        """
        return self._put(key, data, size, once=False)

    def put_replacing(
        self, key: str, data: bytes | BinaryIO, size: int | None, etag: str
    ) -> ObjectInfo | None:
        """A put under ``If-Match`` on ``etag`` (on the PUT; on a multipart upload's completion,
        after a HEAD that checks it: ``_refuse_other``): None if the object is another one by then, or gone (412, 404), and the
        caller looks again (``blobs.store_blob``). Why: two writers that found one wrong blob
        both replaced it, and with two part sizes the second's etag took the first's away
        (review19a; local and RADOS etags name the write, so there every replace did)."""
        try:
            return self._put(key, data, size, once=False, if_match=etag)
        except (ObjectChanged, ObjectNotFound):
            return None

    def _put(
        self, key: str, data: bytes | BinaryIO, size: int | None, *, once: bool, if_match: str | None = None
    ) -> ObjectInfo:
        full = self._full(key)
        if isinstance(data, bytes | bytearray | memoryview):
            payload = _payload(data)
            self._check_size(full, size, len(payload))
            if len(payload) <= self.multipart_threshold:
                return self._put_single(key, full, payload, once, if_match)
            return self._put_multipart(key, full, io.BytesIO(payload), len(payload), None, once, if_match)
        known = size if size is not None else _remaining_size(data)
        if known is not None and known <= self.multipart_threshold:
            payload = read_exactly(data, known + 1)
            self._check_size(full, known, len(payload))
            return self._put_single(key, full, payload, once, if_match)
        first = read_exactly(data, self._part_size(known))
        if known is None and len(first) < self._part_size(None):
            return self._put_single(key, full, first, once, if_match)  # a short stream of unknown size
        return self._put_multipart(key, full, data, known, first, once, if_match)

    def put_once_created(
        self, key: str, data: bytes | BinaryIO, size: int | None = None
    ) -> tuple[ObjectInfo, bool]:
        """A put under ``If-None-Match: *`` (on the PUT, or on the multipart upload's
        completion); a refused one (412: the object is there) answers with its stat.

        Why: S3's etag is the md5 of the bytes for a single PUT but the md5 of the parts' md5s
        for a multipart upload, so one blob put by clients with other thresholds or part sizes
        (two nodes, an import and a commit) got another etag, and the first writer's record
        named an etag the blob lost (review17a). A new single-PUT blob costs no HEAD (the
        base's put-then-stat cost one: bench/writeback/commit_pin.py), a multipart one a HEAD
        before its completion (``_refuse_stored``), a refused one the HEAD of its answer. A
        server that ignores the condition leaves the plain put of before."""
        try:
            return self._put(key, data, size, once=True), True
        except ObjectChanged:
            return self.stat(key), False

    def etag_hasher(self, size: int) -> Md5Etags:
        """The etag ``put`` gives ``size`` bytes: their md5 up to ``multipart_threshold``, else
        the multipart form for the part size ``put`` would cut them in (another client's
        threshold or part size gives another etag: see ``datahub.storage.etags``)."""
        return Md5Etags(None if size <= self.multipart_threshold else self._part_size(size))

    def _refuse_stored(self, key: str, full: str) -> None:
        """ObjectChanged if an object is at ``key`` (``put_once`` then keeps it): one HEAD before
        a multipart upload completes. Why: Ceph RGW 16 ignores ``If-None-Match`` on
        ``CompleteMultipartUpload`` (moto and AWS honour it), so a blob stored while the parts
        were sent was replaced under another etag (review17a); what is left there is the
        moment between this HEAD and the completion."""
        try:
            self.stat(key)
        except ObjectNotFound:
            return
        raise ObjectChanged(
            f"s3://{self.bucket}/{full} is already stored: put_once keeps it", bucket=self.bucket, key=full
        )

    def _refuse_other(self, key: str, full: str, etag: str) -> None:
        """ObjectChanged unless the object at ``key`` still has ``etag`` (ObjectNotFound if
        gone): one HEAD before a conditional multipart upload completes. Why: moto and Ceph
        RGW ignore ``If-Match`` on ``CompleteMultipartUpload`` (AWS honours it, and it is sent
        too; ``tests/storage/test_blobcas19.py``); what is left there is the moment between
        this HEAD and the completion."""
        if self.stat(key).etag != etag:
            raise ObjectChanged(
                f"s3://{self.bucket}/{full} is no longer the object of etag {etag}: not replaced",
                bucket=self.bucket,
                key=full,
            )

    def _check_size(self, full: str, declared: int | None, actual: int) -> None:
        if declared is not None and declared != actual:
            got = "more bytes" if actual > declared else f"{actual} bytes"
            raise InvalidInput(
                f"put of s3://{self.bucket}/{full}: declared size {declared} but the data had {got}",
                bucket=self.bucket,
                key=full,
            )

    def _part_size(self, size: int | None) -> int:
        if size is None:
            return self.multipart_chunk
        return max(self.multipart_chunk, math.ceil(size / MAX_PARTS / MIN_PART) * MIN_PART)

    def put_with_record(self, key: str, data: bytes | bytearray, record: bytes) -> ObjectInfo:
        """``put``, with ``record`` stored as the object's user metadata ``datahub-record``
        (base64) by the same single PUT: durable with the bytes or not at all. Why: a
        write-back cover record (datahub/writeback/chunks.py) rides with its chunk instead of
        costing the journal a transaction and its shared-log record, a second PUT (ceph41).
        ``record_fits`` says which records and sizes it takes (InvalidInput otherwise)."""
        full = self._full(key)
        if not self.record_fits(len(data), len(record)):
            raise InvalidInput(
                f"put of s3://{self.bucket}/{full}: a record of {len(record)} bytes with {len(data)} "
                f"bytes does not fit one PUT's metadata (at most {RECORD_MAX} bytes, a single PUT)",
                bucket=self.bucket,
                key=full,
            )
        return self._put_single(key, full, _payload(data), False, None, base64.b64encode(record).decode())

    def record_fits(self, size: int, record_bytes: int) -> bool:
        """Whether ``put_with_record`` takes a record of ``record_bytes`` with ``size`` bytes:
        one single PUT, and metadata within what S3 stores (2 KB of user metadata on AWS)."""
        return size <= self.multipart_threshold and 4 * -(-record_bytes // 3) <= RECORD_MAX

    def keeps_records(self, probe_key: str) -> bool:
        """Whether this store keeps what ``put_with_record`` stores: a probe object at
        ``probe_key`` put with ``PROBE_RECORD``, read back by a HEAD, compared byte for byte
        and deleted, once per store object (its answer is remembered; a probe that failed is
        tried again next time, and answers False meanwhile). Why (probe21): a write-back
        close acknowledged by one PUT whose metadata carries its cover record (ceph41) lost
        the file in a crash on a store that drops or cuts user metadata; there the synced
        commit is used instead, and the log says so once per store."""
        kept = self._records_kept  # known: every close after the first asks without the lock
        if kept is not None:
            return kept
        with self._probe_lock:
            if self._records_kept is not None:
                return self._records_kept
            try:
                self.put_with_record(probe_key, b"probe", PROBE_RECORD)
                try:
                    kept = self.record(probe_key) == PROBE_RECORD
                finally:
                    self.delete(probe_key)
            except DatahubError as exc:
                log.warning(
                    "%s: could not probe whether the store keeps user metadata (%s): "
                    "write-back closes commit synced until a probe succeeds",
                    self.root_url,
                    exc,
                )
                return False
            self._records_kept = kept
            if not kept:
                log.warning(
                    "%s: the store does not give back the user metadata %r it was sent (%d bytes): "
                    "write-back closes of new files commit synced (a journal transaction each), not "
                    "covered by their PUT",
                    self.root_url,
                    f"x-amz-meta-{RECORD_META}",
                    len(base64.b64encode(PROBE_RECORD)),
                )
            return kept

    def unfinished_uploads(self, prefix: str) -> list[tuple[str, str]]:
        """(key, upload id) of every multipart upload begun under ``prefix`` of this store and
        neither completed nor aborted (``ListMultipartUploads``, a page of 1,000 at a time).
        Why: a process killed mid-upload (``_put_multipart``'s abort never ran) leaves its parts
        stored, and billed, until someone aborts them; only their writer's owner knows none of
        them is still in flight (datahub/writeback: recovery, adoption)."""
        full = self.prefix + prefix  # a listing's prefix, as ``S3Store.list`` takes one ("" too)
        cut = len(self.prefix)
        found: list[tuple[str, str]] = []
        marker: dict[str, str] = {}
        while True:
            page = self._call(
                full or None,
                lambda marker=marker: self._client.list_multipart_uploads(
                    Bucket=self.bucket, Prefix=full, **marker
                ),
            )
            found += [(u["Key"][cut:], u["UploadId"]) for u in page.get("Uploads") or []]
            if not page.get("IsTruncated"):
                return found
            marker = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort multipart upload ``upload_id`` of ``key`` (``unfinished_uploads``): its parts
        are deleted. One already gone (completed or aborted meanwhile) is no error."""
        full = self._full(key)
        try:
            self._call(
                full,
                lambda: self._client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload_id),
            )
        except ObjectNotFound:
            pass  # NoSuchUpload: nothing left to abort

    def record(self, key: str) -> bytes:
        """What ``put_with_record`` stored with object ``key`` (b"" if nothing): one HEAD."""
        full = self._full(key)
        head = self._call(full, lambda: self._client.head_object(Bucket=self.bucket, Key=full))
        value = (head.get("Metadata") or {}).get(RECORD_META, "")
        try:
            return base64.b64decode(value, validate=True) if value else b""
        except ValueError:
            return b""  # not ours: no record

    def _put_single(
        self,
        key: str,
        full: str,
        payload: bytes | memoryview,
        once: bool,
        if_match: str | None = None,
        record: str | None = None,
    ) -> ObjectInfo:
        """One PutObject: the lean signed PUT (``s3get``) when the connection has the lean
        path, else boto3 (0.6-1 ms more client CPU per 100 KB request: a small file's write-back).
        ``once``: only if no object is at the key (``If-None-Match: *``; ObjectChanged if one is).
        ``record``: the value of the user metadata ``datahub-record`` (``put_with_record``)."""
        lean = self._conn.getter if if_match is None else None  # the lean PUT sends no If-Match
        meta = {RECORD_META: record} if record is not None else None
        if lean is not None:
            etag = self._call(
                full,
                lambda: lean.put(self.bucket, full, payload, budget=remaining(), once=once, metadata=meta),
            )
            return ObjectInfo(key, len(payload), unquote_etag(etag), self._clock())
        condition: dict[str, Any] = {"IfNoneMatch": "*"} if once else {}
        if if_match is not None:
            condition["IfMatch"] = if_match
        if meta is not None:
            condition["Metadata"] = meta
        body = bytes(payload)  # boto3's body: bytes (a copy of a view, as every payload was before)
        resp = self._call(
            full, lambda: self._client.put_object(Bucket=self.bucket, Key=full, Body=body, **condition)
        )
        return ObjectInfo(key, len(payload), unquote_etag(resp["ETag"]), self._clock())

    def _put_multipart(
        self,
        key: str,
        full: str,
        fh: BinaryIO,
        size: int | None,
        first: bytes | None,
        once: bool,
        if_match: str | None = None,
    ) -> ObjectInfo:
        """Read parts one at a time and upload up to ``multipart_concurrency`` at once.

        A slot is taken before a part is read and given back once it is sent, so at most
        ``concurrency`` parts are in memory (being read or sent), whatever the object size.
        The first failed part stops reading; any failure aborts the upload.
        """
        part_size = self._part_size(size)
        upload = self._call(full, lambda: self._client.create_multipart_upload(Bucket=self.bucket, Key=full))[
            "UploadId"
        ]
        slots = threading.BoundedSemaphore(self.multipart_concurrency)
        failed = threading.Event()

        def send(number: int, chunk: bytes) -> dict[str, Any]:
            try:
                resp = self._call(
                    full,
                    lambda: self._client.upload_part(
                        Bucket=self.bucket, Key=full, UploadId=upload, PartNumber=number, Body=chunk
                    ),
                )
                return {"PartNumber": number, "ETag": resp["ETag"]}
            except BaseException:
                failed.set()
                raise
            finally:
                slots.release()

        futures: list[Future[dict[str, Any]]] = []
        total = 0
        try:
            with ThreadPoolExecutor(self.multipart_concurrency, thread_name_prefix="s3-part") as pool:
                try:
                    slots.acquire()
                    chunk = first if first is not None else read_exactly(fh, part_size)
                    while chunk and not failed.is_set():
                        futures.append(pool.submit(send, len(futures) + 1, chunk))
                        total += len(chunk)
                        if size is not None and total > size:
                            break
                        slots.acquire()
                        chunk = read_exactly(fh, part_size)
                except BaseException:
                    failed.set()  # reading the source failed (or we were interrupted)
                    raise
                finally:
                    if failed.is_set():
                        for f in futures:
                            f.cancel()  # parts not yet started are dropped, running ones finish
            parts = [f.result() for f in futures]  # re-raises the first failed part
            self._check_size(full, size, total)
            if once:
                self._refuse_stored(key, full)
            if if_match is not None:
                self._refuse_other(key, full, if_match)
            done = self._call(
                full,
                lambda: self._client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=full,
                    UploadId=upload,
                    MultipartUpload={"Parts": parts},
                    **({"IfNoneMatch": "*"} if once else {}),
                    **({"IfMatch": if_match} if if_match is not None else {}),
                ),
            )
        except BaseException:
            try:  # nothing half-written: drop the parts (best effort; lifecycle rules catch the rest)
                self._call(
                    full,
                    lambda: self._client.abort_multipart_upload(
                        Bucket=self.bucket, Key=full, UploadId=upload
                    ),
                )
            except DatahubError as exc:
                log.warning(
                    "could not abort multipart upload %s of %s/%s: %s", upload, self.root_url, key, exc
                )
            raise
        etag = unquote_etag(done.get("ETag") or "")
        if not etag:  # Ceph RGW answers <ETag></ETag> here; the object itself has one
            return self.stat(key)
        return ObjectInfo(key, total, etag, self._clock())
