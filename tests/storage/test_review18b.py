"""review18b: two writers of one blob race past ``put_once``'s HEAD (review17a's
``If-None-Match: *`` and the HEAD before a multipart completion), on the moto server and on
the suite's Ceph RGW, and each writer's answer is then read as a record through a real cache.

Moto refuses the second completion (its condition); the suite's RGW does not (it ignores the
condition on ``CompleteMultipartUpload``, as ``_refuse_stored`` says of RGW 16): the second
upload replaces the first writer's blob with the same bytes under another etag, and the first
writer's answer names an etag the blob lost. That is the gap ``_refuse_stored`` documents; what
keeps it from losing data is blobs17's self-verifying read, which this test checks on the real
race: every writer's record reads the blob's bytes.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from datahub.cache import open_cache
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from tests.cache.test_integrity15 import READS, _config
from tests.servers import S3Endpoint

MiB = 1 << 20


def test_two_multipart_put_onces_past_their_heads_leave_records_that_both_read(
    tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    """Two writers of one blob with other part sizes (so other etags) both pass the HEAD before
    either completes (held at a barrier); the first completes, then the second. (Not at once:
    moto checks the condition and then completes without a lock, so two completions sent
    together both pass there.) One blob is left, with its bytes, no upload's parts stay behind,
    and a record of either writer's answer reads those bytes through the cache."""
    from datahub.storage.s3 import S3Store

    payload = os.urandom(5 * MiB + 3)  # parts of 5 MiB + 3 bytes, or one of 6 MiB
    key = blob_key(hashlib.sha256(payload).hexdigest())
    root = f"s3://{s3_endpoint.new_bucket('race')}/objects"
    config = _config(tmp_path, s3_endpoint, **READS["pages"]).model_copy(update={"objects_url": root})
    bucket, prefix = root[len("s3://") :].split("/", 1)
    writers = []
    for chunk in (5 * MiB, 6 * MiB):
        settings = config.s3.model_copy(update={"multipart_threshold": MiB, "multipart_chunk": chunk})
        writers.append(S3Store(bucket, prefix, settings, lean_get=True))
    a, b = writers
    both_looked, a_done = threading.Barrier(2, timeout=30), threading.Event()
    for store, then in ((a, lambda: None), (b, lambda: a_done.wait(30))):
        looked = store._refuse_stored

        def held(k: str, full: str, looked=looked, then=then) -> None:
            looked(k, full)  # nothing there yet, for either
            both_looked.wait()
            then()

        store._refuse_stored = held
    answers: dict[str, object] = {}

    def put(name: str, store) -> None:
        try:
            answers[name] = store.put_once(key, payload)
        except BaseException as exc:  # the assertion below shows it
            answers[name] = exc
        finally:
            if name == "a":
                a_done.set()

    threads = [threading.Thread(target=put, args=(n, s)) for n, s in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        stored = a.stat(key)
        assert stored.size == len(payload) and a.read(key, etag=stored.etag) == payload, answers
        assert a._client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

        with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
            for name in ("a", "b"):
                ref = ObjectRef(a.url_for(key), answers[name].etag, len(payload))  # type: ignore[union-attr]
                assert cache.read(ref, 0, 4096) == payload[:4096], name
                assert cache.read(ref, len(payload) - 4099) == payload[-4099:], name
    finally:
        a.close()
        b.close()
