"""blobcas19: a local or RADOS store replaces a wrong blob only while the name holds that very
object (``put_replacing``, used by ``blobs.BlobWriter.put``; review19a's finding, whose race
through ``store_blob`` is ``tests/storage/test_review19a.py``)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.errors import ObjectNotFound
from datahub.storage import local, open_store
from datahub.storage.local import LocalStore
from tests.storage.conftest import make_config

KEY = "blobs/sha256/ab/cd/abcd"
MiB = 1024**2
WRONG, RIGHT, OTHER = b"W" * 64, b"R" * 64, b"O" * 64


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "objects")


def test_the_file_found_wrong_is_replaced(store: LocalStore) -> None:
    found = store.put(KEY, WRONG)
    info = store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag)
    assert info is not None and info.etag == store.stat(KEY).etag
    assert store.read(KEY, etag=info.etag) == RIGHT
    assert not [n for n in os.listdir(store._path(KEY).parent) if n.startswith(local.TEMP_PREFIX)]


def test_a_file_replaced_since_it_was_found_is_kept(store: LocalStore) -> None:
    found = store.put(KEY, WRONG)
    theirs = store.put(KEY, OTHER)  # another writer's, after ours was found wrong
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag) is None
    assert store.read(KEY, etag=theirs.etag) == OTHER  # its etag stands
    store.delete(KEY)
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag) is None  # gone: nothing put
    with pytest.raises(ObjectNotFound):
        store.stat(KEY)


def test_a_name_already_holding_the_bytes_keeps_its_etag(store: LocalStore) -> None:
    found = store.put(KEY, WRONG)
    fixed = store.put(KEY, RIGHT)
    info = store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag)
    assert info is not None and info.etag == fixed.etag


def test_a_plain_put_between_the_check_and_the_exchange_goes_back(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that takes no lock (a plain ``put``) lands after the check: the file swapped
    out is not the one checked, so it goes back, keeping its inode, and nothing is put."""
    found = store.put(KEY, WRONG)
    check = local._current_etag
    plain: list = []

    def put_meanwhile(target, st, expected):
        current = check(target, st, expected)
        plain.append(store.put(KEY, OTHER))
        return current

    monkeypatch.setattr(local, "_current_etag", put_meanwhile)
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag) is None
    monkeypatch.setattr(local, "_current_etag", check)
    assert store.read(KEY) == OTHER
    assert os.stat(store._path(KEY)).st_ino == int(plain[0].etag.split("-")[0], 16)
    assert not [n for n in os.listdir(store._path(KEY).parent) if n.startswith(local.TEMP_PREFIX)]


@pytest.fixture
def rados_store(ceph_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple]:
    """A rados:// store on the session Ceph's pool under a fresh prefix, and a plain librados
    I/O context on that pool: another client."""
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])
    monkeypatch.setenv("CEPH_CONF", ceph_cluster.vars["CEPH_CONF"])
    import rados

    prefix = f"b19-{uuid.uuid4().hex[:12]}"
    store = open_store(f"rados://{ceph_cluster.vars['CEPH_POOL']}/{prefix}", make_config(tmp_path))
    cluster = rados.Rados(conffile=ceph_cluster.vars["CEPH_CONF"])
    cluster.connect()
    ioctx = cluster.open_ioctx(ceph_cluster.vars["CEPH_POOL"])
    try:
        yield store, ioctx, prefix
    finally:
        with contextlib.suppress(Exception):
            ioctx.remove_object(f"{prefix}/{KEY}")
        ioctx.close()
        cluster.shutdown()
        store.close()


def test_rados_replaces_only_the_object_version_found_wrong(rados_store: tuple) -> None:
    """The write op asserts the version the etag names: another client's write since (which
    moves the version) or a delete makes it write nothing; else it replaces (review19a)."""
    store, ioctx, prefix = rados_store
    found = store.put(KEY, WRONG)
    ioctx.write_full(f"{prefix}/{KEY}", OTHER)  # another client's write after ours found it wrong
    theirs = store.stat(KEY)
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag) is None
    assert store.read(KEY, etag=theirs.etag) == OTHER  # its version, its etag, stand
    info = store.put_replacing(KEY, RIGHT, len(RIGHT), theirs.etag)
    assert info is not None and info.etag == store.stat(KEY).etag and store.read(KEY, etag=info.etag) == RIGHT
    store.delete(KEY)
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), info.etag) is None  # gone: nothing put
    with pytest.raises(ObjectNotFound):
        store.stat(KEY)


def test_each_store_replaces_only_the_object_found_wrong(backend) -> None:
    """On every store with ``put_replacing`` (S3 and RGW: If-Match on the PUT, and on a
    multipart upload's completion), a put over an object found wrong writes nothing once
    another writer's object is there, and replaces the one it names."""
    store = backend.open(multipart_threshold=MiB, multipart_chunk=5 * MiB)
    sizes = (64, MiB + 1) if backend.is_s3 else (64,)  # a single PUT, and a multipart upload
    for n in sizes:
        wrong, other, right = b"W" * n, b"O" * n, b"R" * n
        found = store.put(KEY, wrong)
        theirs = store.put(KEY, other)
        assert store.put_replacing(KEY, right, n, found.etag) is None
        assert store.read(KEY, etag=theirs.etag) == other
        info = store.put_replacing(KEY, right, n, theirs.etag)
        assert info is not None and store.read(KEY, etag=info.etag) == right
        store.delete(KEY)
        assert store.put_replacing(KEY, right, n, info.etag) is None
