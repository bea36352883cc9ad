"""wbgaps25: multipart uploads a kill -9 cut short mid-flush are aborted by the next open.

A flush streams a large file to its flush folder as a multipart upload (S3/RGW); a process
killed mid-upload never ran ``_put_multipart``'s abort, and its parts stayed in the bucket,
billed, for good (nothing but a lifecycle rule aborted them). Now recovery after a crash aborts
the unfinished uploads under the journal's own chunk prefix and flush folder, never another
workspace's or journal's; the restarted flush then uploads the file once, whole. Real
processes on moto in server mode (``tests/writeback/crash_worker.py``, mode "flush").
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.writeback import workspace_dir
from datahub.writeback.adopt import adopt_journal
from tests.writeback.conftest import make_env, write
from tests.writeback.test_crash import MiB, recover_and_check, run_until, spec_for


def _uploads(client, bucket: str) -> list[str]:
    """The keys of the bucket's unfinished multipart uploads."""
    return sorted(u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads") or [])


@pytest.mark.slow
def test_a_multipart_upload_killed_mid_flush_is_aborted_and_the_file_uploaded_once(
    tmp_path: Path, moto_endpoint
) -> None:
    env = make_env(tmp_path, moto_endpoint, shared_s3=True, origin_s3=True)
    client = moto_endpoint.client()
    shared, origin = env.buckets
    others = []
    try:
        spec = spec_for(env, "flush", files=1, size=11 * MiB + 3, block_after=7 * MiB)
        spec["overrides"]["s3"].update(multipart_threshold=5 * MiB, multipart_chunk=5 * MiB)
        spec["overrides"]["cache"]["origin_concurrency"] = 1
        acked = run_until(spec, "MIDFLUSH")  # killed with its first part sent, its second being read
        assert len(acked) == 1
        left = _uploads(client, origin)
        assert len(left) == 1 and left[0].endswith("/f0")  # what the kill left behind
        # other journals' and workspaces' uploads under the same buckets: theirs, never aborted
        for bucket, key in (
            (origin, "out/j-0123456789abcdef/f0"),  # another journal's folder of the same target
            (origin, "elsewhere/f0"),
            (shared, "node-a/writeback/other/j-0123456789abcdef/0/1.0.ab"),  # another workspace's chunk
            (shared, "node-a/writeback/ws/j-0123456789abcdef/0/1.0.ab"),  # another journal's chunk
        ):
            client.create_multipart_upload(Bucket=bucket, Key=key)
            others.append((bucket, key))
        recover_and_check(env, acked)  # reopens, flushes: f0 in its folder once, its bytes
        assert _uploads(client, origin) == sorted(k for b, k in others if b == origin)  # before: f0's too
        assert _uploads(client, shared) == sorted(k for b, k in others if b == shared)
        listed = [o["Key"] for o in client.list_objects_v2(Bucket=origin).get("Contents", [])]
        assert len(listed) == 1 and listed[0].endswith("/f0")  # the file, once
        body = client.get_object(Bucket=origin, Key=listed[0])["Body"].read()
        assert hashlib.sha256(body).hexdigest() == acked["f0"]
    finally:
        for bucket in (shared, origin):
            for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads") or []:
                client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        env.close()


def _leave_upload(client, store, key: str, prefix: str | None = None) -> tuple[str, str]:
    """A multipart upload of ``key`` of ``store`` (an S3Store; under ``prefix`` of its bucket
    instead of the store's own) with one part sent and no completion: what a process killed
    mid-upload leaves. (bucket, full key)."""
    full = (store.prefix if prefix is None else prefix) + key
    upload = client.create_multipart_upload(Bucket=store.bucket, Key=full)["UploadId"]
    client.upload_part(Bucket=store.bucket, Key=full, UploadId=upload, PartNumber=1, Body=b"part")
    return store.bucket, full


def test_an_adoption_aborts_the_lost_journals_unfinished_uploads_and_no_others(
    tmp_path: Path, moto_endpoint
) -> None:
    a_env = make_env(tmp_path / "a", moto_endpoint, shared_s3=True, origin_s3=True)
    b_env = make_env(tmp_path / "b", moto_endpoint, shared_url=a_env.config.cache.shared_url)
    client = moto_endpoint.client()
    leases = None
    try:
        a = a_env.open()
        write(a, "small", b"acknowledged")
        lost = [  # a killed mid-flush of "big", and mid-upload of a chunk (a large page size)
            _leave_upload(client, a.flusher.origin, "big"),
            _leave_upload(client, a.chunks.store, f"{a.chunks.prefix}/0/1.0.0123456789abcdef"),
        ]
        a_journal = a.chunks.journal
        a.abandon()
        shutil.rmtree(workspace_dir(a_env.config, "ws"))
        leases = SQLiteCatalogStore(tmp_path / "catalog.db")
        b = b_env.open(lease=leases, target_url=a_env.target_url)
        kept = [
            _leave_upload(client, b.flusher.origin, "own"),  # the adopter's own flush folder
            _leave_upload(client, b.chunks.store, f"{b.chunks.prefix}/0/1.0.0123456789abcdef"),
            _leave_upload(client, b.flusher.origin, "x", "out/j-0123456789abcdef/"),  # a third journal's
            _leave_upload(client, a.chunks.store, "writeback/other/j-0123456789abcdef/0/1.0.ab"),
        ]
        try:
            report = adopt_journal(b, a_journal, b_env.stores)
            assert report.files == ["small"]
            left = sorted((b, u["Key"]) for b in {k[0] for k in lost + kept}
                          for u in client.list_multipart_uploads(Bucket=b).get("Uploads") or [])  # fmt: skip
            assert left == sorted(kept)  # before: the lost journal's two as well
        finally:
            b.close()
    finally:
        for env in (a_env, b_env):
            for bucket in env.buckets:
                for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads") or []:
                    client.abort_multipart_upload(
                        Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
        if leases is not None:
            leases.close()
        b_env.close()
        a_env.close()
