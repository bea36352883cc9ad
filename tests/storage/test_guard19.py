"""guard19: whose blob a remembered proof is, and two writers replacing one bad blob at once.

``datahub.storage.blobs`` remembers that a blob holds its name's content per (store identity,
url, etag). Keyed by (url, etag) alone, a RADOS blob proven on one Ceph cluster was trusted on
another with a pool of the same name: a RADOS etag is an object version, which the other
cluster's object under the same key may have with other bytes (wrong bytes served under the
content's checksum). The identity is a RADOS store's cluster fsid, an S3 store's endpoint, a
local store's root device and inode.

Two writers (commits, ``--copy`` imports) that find one blob of the right size but other bytes
both write the content over it: no reader of either one's record ever gets other bytes, and
both records read the content (on a local store the first replacement's etag is lost to the
second's; the read path's self-verification serves that record from the blob, which hashes
to its name: ``datahub.cache.selfverify``).
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cache import selfverify
from datahub.config import load_config
from datahub.storage import StoreRegistry, open_store
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.blobs import VERIFIED, BlobWriter, Content, blob_key, store_blob
from datahub.storage.local import LocalStore
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config
from tests.storage.test_blobs18 import Writes, _count_reads

CONTENT = b"guard19: the weights of epoch 7\n" * 2000
DIGEST = hashlib.sha256(CONTENT).hexdigest()
KEY = blob_key(DIGEST)
OTHER = bytes(reversed(CONTENT))  # the same size, other bytes


@pytest.fixture(autouse=True)
def _fresh_proofs() -> Iterator[None]:
    VERIFIED.clear()
    yield
    VERIFIED.clear()


def _by_reading() -> Content:
    """What a writer knows when the store's etags are no md5 of the bytes: proof is a read."""
    return Content(DIGEST, len(CONTENT))


# --- whose blob a proof is -----------------------------------------------------------------------
@pytest.mark.ceph
def test_a_rados_blob_proven_on_one_cluster_is_no_proof_on_another_with_the_pool_name(
    ceph_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three stores of one ``rados://pool/prefix``: two on the test cluster share its proofs;
    the third stands for another cluster (its fsid is another's, as its ``$CEPH_CONF`` would
    give), whose object of the same version must be read, not taken on the first's proof."""
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])
    monkeypatch.setenv("CEPH_CONF", ceph_cluster.vars["CEPH_CONF"])
    root = f"rados://{ceph_cluster.vars['CEPH_POOL']}/g19-{uuid.uuid4().hex[:12]}"
    config = make_config(tmp_path)
    here, again, elsewhere = (open_store(root, config) for _ in range(3))
    try:
        here.put(KEY, CONTENT)
        assert store_blob(here, _by_reading(), Writes(CONTENT)).written == 0  # read, proven, kept
        reads = _count_reads(monkeypatch, again)
        assert store_blob(again, _by_reading(), Writes(CONTENT)).written == 0
        assert reads == []  # the same cluster: its proof holds
        elsewhere.stat(KEY)  # connected; then it is another cluster's
        monkeypatch.setattr(elsewhere._session.get(), "fsid", str(uuid.uuid4()))  # this process's
        reads = _count_reads(monkeypatch, elsewhere)
        assert store_blob(elsewhere, _by_reading(), Writes(CONTENT)).written == 0
        assert reads == [KEY]  # before: [], the other cluster's proof taken for this one's bytes
        fsid = next(
            line.split("=", 1)[1].strip()
            for line in Path(ceph_cluster.vars["CEPH_CONF"]).read_text().splitlines()
            if line.strip().startswith("fsid")
        )
        assert fsid in here.identity() and here.identity() == again.identity() != elsewhere.identity()
    finally:
        for store in (here, again, elsewhere):
            store.close()


def localhost_alias(endpoint: S3Endpoint) -> S3Endpoint:
    """The same moto server reached as localhost: another endpoint for all a store knows."""
    alias = S3Endpoint(
        "moto", endpoint.url.replace("127.0.0.1", "localhost"), endpoint.access_key, endpoint.secret_key
    )
    assert alias.url != endpoint.url
    return alias


def test_an_s3_blob_proven_at_one_endpoint_is_no_proof_at_another_with_the_bucket_name(
    moto_endpoint: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One moto, reached as 127.0.0.1 and as localhost: two endpoints to the store, so two
    services for all it knows (each may have a bucket of the name)."""
    bucket = moto_endpoint.new_bucket()
    root = f"s3://{bucket}/blobs"
    alias = localhost_alias(moto_endpoint)
    here = open_store(root, make_config(tmp_path, moto_endpoint))
    elsewhere = open_store(root, make_config(tmp_path, alias))
    try:
        here.put(KEY, CONTENT)
        assert store_blob(here, _by_reading(), Writes(CONTENT)).written == 0
        reads = _count_reads(monkeypatch, elsewhere)
        assert store_blob(elsewhere, _by_reading(), Writes(CONTENT)).written == 0
        assert reads == [KEY]  # before: [], taken on the other endpoint's proof
    finally:
        here.close()
        elsewhere.close()


def test_a_local_stores_identity_is_its_roots_file_not_its_path(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    store = LocalStore(root)
    assert store.identity() == ""  # no root yet: nothing is remembered
    root.mkdir()
    first = store.identity()
    assert first.startswith(root.as_uri())
    root.rename(tmp_path / "old")
    root.mkdir()  # another directory at the same path (as another file system mounted there)
    assert store.identity() not in ("", first)


# --- two writers replacing one bad blob at once --------------------------------------------------
@pytest.fixture(params=["local", "moto"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[StoreRegistry, ObjectStore]]:
    """The platform's objects store (blobs go there, and only its blobs self-verify on read)."""
    overrides: dict = {"home": str(tmp_path / "home")}
    if request.param == "moto":
        endpoint: S3Endpoint = request.getfixturevalue("moto_endpoint")
        overrides |= endpoint.s3_config_overrides() | {"objects_url": f"s3://{endpoint.new_bucket()}/objects"}
    else:
        overrides["objects_url"] = (tmp_path / "objects").as_uri()
    stores = StoreRegistry(load_config(env={}, overrides=overrides))
    yield stores, stores.store(stores.config.objects_url)
    stores.close()


def test_two_writers_replacing_one_bad_blob_leave_records_that_read_the_content(
    objects: tuple[StoreRegistry, ObjectStore],
) -> None:
    """Both writers find the bad blob and both decide to write over it (the barrier holds the
    first put until the second has decided too); readers read each record as soon as its
    writer returns, while the other may still be writing. Every answer is the content."""
    stores, store = objects
    store.put(KEY, OTHER)
    url = store.url_for(KEY)
    decided = threading.Barrier(2, timeout=60)
    records: list[ObjectInfo] = []
    answers: list[bytes | BaseException] = []
    lock = threading.Lock()

    def write(writer: BlobWriter, replace: bool) -> ObjectInfo:
        if replace:
            decided.wait()  # both found other bytes: both replace
        return (writer.put if replace else writer.put_once)(KEY, io.BytesIO(CONTENT), len(CONTENT))

    def read(info: ObjectInfo) -> None:
        try:
            got: bytes | BaseException = selfverify.read(
                stores, store, KEY, url, info.etag, 0, len(CONTENT) + 1
            )
        except BaseException as exc:  # any failure is an answer the test shows
            got = exc
        with lock:
            answers.append(got)

    def commit() -> None:
        info = store_blob(store, Content(DIGEST, len(CONTENT), lambda: _md5_etags(store)), write).info
        with lock:
            records.append(info)
        read(info)  # a reader of this record while the other writer may still be at work

    writers = [threading.Thread(target=commit) for _ in range(2)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(timeout=120)
    assert len(records) == 2
    for info in records:  # and once both are done
        read(info)
    assert [a if isinstance(a, BaseException) else a == CONTENT for a in answers] == [True] * 4
    assert store.read(KEY) == CONTENT


def _md5_etags(store: ObjectStore) -> frozenset[str]:
    hasher = store.etag_hasher(len(CONTENT))
    if hasher is None:
        return frozenset()
    hasher.update(CONTENT)
    return hasher.etags()


def test_a_blob_replaced_while_it_is_checked_is_looked_at_again(tmp_path: Path) -> None:
    """A writer reading the bad blob to hash it while another writes the content over it:
    the check fails (ObjectChanged), and the second look proves the new blob instead of
    writing over it again."""
    store = LocalStore(tmp_path / "objects")
    store.put(KEY, OTHER)
    chunks = store.read_chunks
    replaced: list[ObjectInfo] = []

    def read_chunks(key, *args, **kwargs):
        if not replaced:
            replaced.append(LocalStore(tmp_path / "objects").put(KEY, CONTENT))  # the other writer
        yield from chunks(key, *args, **kwargs)

    store.read_chunks = read_chunks  # type: ignore[method-assign]
    writes = Writes(CONTENT)
    stored = store_blob(store, _by_reading(), writes)
    assert writes.calls == [] and stored.written == 0 and stored.info.etag == replaced[0].etag
    assert os.path.getsize(tmp_path / "objects" / KEY) == len(CONTENT)
